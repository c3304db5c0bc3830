"""``python -m rlxc``: the ``rlxc`` command (see :mod:`rlxc.cli`).

With no arguments it runs the demo, which needs no download: a random Llama-shaped stack
(alternating sliding and full attention, GQA, Q4_0 weights) is printed layer by layer, then a
prompt is prefilled and decoding is timed on this CPU's kernels. ``python -m rlxc --help``
lists the commands (info, run, compare, bench, quantize).
"""

import sys

from rlxc.cli import main

if __name__ == "__main__":
    sys.exit(main())
