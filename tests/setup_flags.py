"""setup.py's compiler flags for a target machine, so that the C kernel tests
(build_kernel_test.sh, build_kernel_test_neon.sh) compile what the extension compiles.

    python3 tests/setup_flags.py MACHINE        (x86_64, aarch64, ...)

Prints "COMMON<TAB>flags", then "dir<TAB>flags" for each kernel directory setup.py compiles
for MACHINE. setup.py runs setup() when imported, so its flag constants and kernel_dirs() are
taken from its syntax tree, and kernel_dirs() is evaluated with target_machine() pinned to
MACHINE.
"""
import ast
import os
import sys

SETUP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.py")


def setup_flags(machine: str):
    with open(SETUP) as f:
        tree = ast.parse(f.read(), SETUP)
    names = {"COMMON", "X86_DIRS", "ARM_DIRS"}
    keep = [n for n in tree.body
            if (isinstance(n, ast.Assign) and {getattr(t, "id", None) for t in n.targets} <= names)
            or (isinstance(n, ast.FunctionDef) and n.name == "kernel_dirs")]
    ns = {"target_machine": lambda: machine}
    exec(compile(ast.Module(body=keep, type_ignores=[]), SETUP, "exec"), ns)
    return ns["COMMON"], ns["kernel_dirs"]()


if __name__ == "__main__":
    common, dirs = setup_flags(sys.argv[1])
    print("COMMON\t" + " ".join(common))
    for d, flags in dirs.items():
        print(d + "\t" + " ".join(flags))
