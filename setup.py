"""Build of the rlxc extension.

Each kernel directory is compiled with its own ISA flags and only on the architecture
it targets, so a single wheel dispatches at run time and no AVX instruction can leak
into code the scalar path runs. RLXC_SANITIZE=1 builds with ASan + UBSan.
"""

import os
import platform
import sysconfig
from glob import glob

import numpy as np
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
COMMON = ["-std=c11", "-O2", "-ffp-contract=off", "-fopenmp", "-Wall", "-Wextra", "-Wno-format-truncation",
          "-Wno-unused-parameter"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g"]

# Flags per kernel directory, by the machine the build targets.
X86_DIRS = {
    "kernels_avx2": ["-O3", "-mavx2", "-mfma", "-mf16c"],
    "kernels_avx512": ["-O3", "-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl",
                       "-mavx512dq", "-mavx512vnni", "-mamx-tile", "-mamx-int8"],
}
# Plain ARMv8.0 so the module runs on every aarch64 CPU: the dotprod kernels carry their own
# target attribute and are chosen at run time from HWCAP (kernels_neon/table.c).
ARM_DIRS = {"kernels_neon": ["-O3", "-march=armv8-a"]}


def target_machine() -> str:
    # sysconfig's platform names the interpreter we build for, which is what matters
    # when cross-building; fall back to the running machine.
    plat = sysconfig.get_platform()
    return "aarch64" if ("aarch64" in plat or "arm64" in plat) else platform.machine()


def kernel_dirs() -> dict:
    m = target_machine()
    if m in ("x86_64", "AMD64", "i686"):
        return X86_DIRS
    if m in ("aarch64", "arm64"):
        return ARM_DIRS
    return {}


def sanitize() -> bool:
    return os.environ.get("RLXC_SANITIZE", "") not in ("", "0")


class BuildExt(build_ext):
    """Compiles each kernel directory with its own flags and links the objects in."""

    def build_extension(self, ext):
        extra = COMMON + (SANITIZE if sanitize() else [])
        objects = []
        for d, flags in kernel_dirs().items():
            sources = sorted(glob(os.path.join(d, "*.c")))
            if sources:
                objects += self.compiler.compile(
                    sources, output_dir=self.build_temp, include_dirs=["csrc"], extra_postargs=extra + flags)
        ext.extra_objects = objects
        super().build_extension(ext)


extra = COMMON + (SANITIZE if sanitize() else [])
ext = Extension(
    "rlxc._rlxc",
    sources=sorted(glob("csrc/*.c")) + sorted(glob("csrc/bindings/*.c")),
    # the kernel directories' objects come from BuildExt: without these an edit there (or to a
    # header) would leave an in-place build's module as it was
    depends=sorted(glob("csrc/**/*.h", recursive=True) + glob("kernels_*/*.[ch]")),
    include_dirs=["csrc", np.get_include()],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")],
    extra_compile_args=extra,
    extra_link_args=["-fopenmp", "-lsleef", "-lm"] + (SANITIZE if sanitize() else []),
)

setup(ext_modules=[ext], cmdclass={"build_ext": BuildExt})
