"""rlxc: decoder-only transformer LLMs on the CPU with hand-written SIMD kernels.

Every layer is an :class:`rlxc.Layer` whose fields and weights are plain Python / NumPy
objects; a :class:`rlxc.Pipeline` runs a stack of them over per-layer KV caches.
"""

import os as _os
from typing import Any as _Any

# GNU OpenMP spins 300k iterations at each of its barriers by default, and on a shared machine a
# spinning thread steals the core that the thread it waits for needs (measured here under load:
# 2-thread decode 4 tok/s by default vs 93-123 tok/s with 1000, when every op opened its own
# parallel region). The engine now opens one region per call and waits between its stages on a
# barrier of its own (spin RLXC_SPIN_US microseconds, default 50, then sleep: csrc/threads.c);
# OpenMP's own barrier remains at each region's end. Read once when libgomp loads, so set it
# before the extension; an explicit GOMP_SPINCOUNT or OMP_WAIT_POLICY from the user wins.
if "GOMP_SPINCOUNT" not in _os.environ and "OMP_WAIT_POLICY" not in _os.environ:
    _os.environ["GOMP_SPINCOUNT"] = "1000"

from . import _rlxc  # noqa: E402
from ._enums import Activation, FfnType, NormType, RopeLayout
from ._layer import Layer, Pipeline, _init_defaults

_rlxc._register_enums(NormType, FfnType, Activation, RopeLayout)
_init_defaults()

from . import interp, ops  # noqa: E402
from .interp import ActivationCache, HookError  # noqa: E402
from .hf import from_hf  # noqa: E402
from .model import Model  # noqa: E402
from .report import Report, compare  # noqa: E402
from . import tokenizer  # noqa: E402
from .loaders import load, save  # noqa: E402
from .profiling import Profile, profile  # noqa: E402

__version__ = "0.1.0"


def cpu_info() -> dict[str, _Any]:
    """CPU features, the active kernel ISA, the ISAs this build can run here, the default thread
    count, and whether the AVX-512 GEMMs use AMX tiles (``amx``; ``RLXC_AMX=0`` turns them off)."""
    return _rlxc.cpu_info()


def set_isa(name: str) -> None:
    """Use the 'scalar', 'avx2', 'avx512' or 'neon' kernels, or 'auto' for the best available."""
    _rlxc.set_isa(name)


def get_isa() -> str:
    """The ISA of the active kernels."""
    return _rlxc.get_isa()


__all__ = ["Activation", "FfnType", "Layer", "Model", "NormType", "Pipeline", "Report", "RopeLayout", "compare",
           "cpu_info", "from_hf", "get_isa", "ops", "set_isa", "__version__"]
__all__ += ["load", "save", "tokenizer", "interp", "ActivationCache", "HookError", "Profile", "profile"]
