"""Where the engine's time goes, stage by stage and thread by thread.

    import rlxc
    with rlxc.profile() as prof:
        model.prefill(ids)
    print(prof)                  # a table; in Jupyter it renders as HTML
    prof.seconds["ffn_up"]       # one value per thread of the team
    prof.seconds["wait"]         # time at the team's barriers, waiting for its slowest thread

Every call into the engine inside the block (a prefill, a decoded token, ``ops.matmul``) charges
each thread's time to the stage it is in (the products, attention, norms, activation
quantization, ...: ``rlxc_time`` in csrc/rlxc.h), from one stage's start to the next. ``wait`` is the price
of a stage split unevenly over the threads, or of a thread the machine slows; ``wall`` minus the
threads' own time is the thread team's start and end. Timing costs two clock reads per stage and
thread; the counters are the process's, so profile one model's calls at a time.
"""

from __future__ import annotations

import contextlib
import html
from collections.abc import Iterator

import numpy as np

from . import _rlxc

__all__ = ["Profile", "profile"]


class Profile:
    """The stage times of the calls made inside one ``with rlxc.profile()`` block (filled when it ends).

    ``seconds``: stage name -> float64 array, seconds each thread spent in it; ``wall``: seconds
    of the engine calls as their caller saw them; ``calls``: how many there were."""

    def __init__(self) -> None:
        self.seconds: dict[str, np.ndarray] = {}
        self.wall = 0.0
        self.calls = 0

    @property
    def threads(self) -> int:
        """Threads of the largest team timed."""
        return len(next(iter(self.seconds.values()))) if self.seconds else 0

    def rows(self) -> list[tuple[str, float, float, float]]:
        """(stage, mean seconds per thread, the slowest thread's seconds, mean as a share of wall)
        for every stage that took time, then "team start and end": wall minus the busiest thread's total."""
        out = [(name, float(s.mean()), float(s.max()), float(s.mean()) / self.wall if self.wall else 0.0)
               for name, s in self.seconds.items() if s.any()]
        if self.threads:
            busiest = float(np.sum(list(self.seconds.values()), axis=0).max())
            outside = max(self.wall - busiest, 0.0)
            out.append(("team start and end", outside, outside, outside / self.wall if self.wall else 0.0))
        return out

    def __repr__(self) -> str:
        head = f"rlxc profile: {self.calls} calls, {self.wall * 1e3:.2f} ms, {self.threads} threads"
        lines = [head, f"{'stage':<20} {'mean ms':>10} {'max ms':>10} {'of wall':>8}"]
        lines += [f"{n:<20} {m * 1e3:>10.3f} {x * 1e3:>10.3f} {100 * f:>7.1f}%" for n, m, x, f in self.rows()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        cells = "".join(f"<tr><td>{html.escape(n)}</td><td>{m * 1e3:.3f}</td><td>{x * 1e3:.3f}</td>"
                        f"<td>{100 * f:.1f} %</td></tr>" for n, m, x, f in self.rows())
        return (f"<p>rlxc profile: {self.calls} calls, {self.wall * 1e3:.2f} ms, {self.threads} threads</p>"
                "<table><tr><th>stage</th><th>mean ms per thread</th><th>slowest thread ms</th>"
                f"<th>mean of wall</th></tr>{cells}</table>")


@contextlib.contextmanager
def profile() -> Iterator[Profile]:
    """Time the engine's stages per thread for the calls made inside the block (see the module doc).
    Raises RuntimeError if a profile is already running."""
    prof = Profile()
    _rlxc.profile_start()
    try:
        yield prof
    finally:
        names, ns, wall, calls = _rlxc.profile_stop()
        prof.seconds = {name: ns[:, s].astype(np.float64) * 1e-9 for s, name in enumerate(names)}
        prof.wall, prof.calls = wall * 1e-9, calls

