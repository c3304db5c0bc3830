"""Resident memory of GGUF files run in place: VmRSS gained by rlxc.load and by a first prefill +
decode (which repack what the active kernels multiply faster repacked and page the mapped rows
out), against the file's size, each file in a fresh process.

    python benchmarks/resident.py FILE.gguf [FILE.gguf ...]
"""

from __future__ import annotations

import os
import subprocess
import sys

CODE = r"""
import sys, numpy as np, rlxc
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS'):
            return int(line.split()[1]) / 1024
base = rss()
m = rlxc.load(sys.argv[1], max_seq=256, tokenizer=False)
loaded = rss()
m.prefill(np.arange(3, 67) % m.vocab_size, logits="last")
m.decode(5)
print(f"{loaded - base:.0f} {rss() - base:.0f}")
"""


def main() -> None:
    print("| file | size MB | RSS after load MB | RSS after prefill + decode MB | ratio to the file |")
    print("|---|---|---|---|---|")
    for path in sys.argv[1:]:
        out = subprocess.run([sys.executable, "-c", CODE, path], capture_output=True, text=True, check=True)
        loaded, ran = (float(x) for x in out.stdout.split())
        size = os.path.getsize(path) / 2**20
        print(f"| {os.path.basename(path)} | {size:.0f} | {loaded:.0f} | {ran:.0f} | {ran / size:.2f} |")


if __name__ == "__main__":
    main()
