"""A GGUF file small enough to carry, grown back to full size where it runs (for speed only).

The device machine has no network and takes at most 64 MiB of files along, too little for Gemma 3
270M (253 MB). ``shrink`` keeps the file's header (metadata, tokenizer, tensor table) and the first
``--keep`` bytes of every tensor, cut at a whole block; ``expand`` writes a file of the original
layout whose tensors repeat those bytes. Every block stays a valid block of its type, the shapes,
types and bytes read per token are the file's own, so both engines run it as fast as the real one;
only the outputs are meaningless.

    python benchmarks/gguf_skeleton.py shrink MODEL.gguf DIR/model.skel.npz
    python benchmarks/gguf_skeleton.py expand DIR/model.skel.npz /tmp/model.gguf
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def shrink(src: str, dst: str, keep: int) -> None:
    import gguf

    reader = gguf.GGUFReader(src)
    raw = np.memmap(src, np.uint8, mode="r")
    arrays: dict[str, np.ndarray] = {"header": np.array(raw[:reader.data_offset])}
    index = []
    for i, t in enumerate(reader.tensors):
        block_bytes = gguf.GGML_QUANT_SIZES[t.tensor_type][1]
        n = min(int(t.n_bytes), max(keep // block_bytes, 1) * block_bytes)
        arrays[f"t{i}"] = np.array(raw[t.data_offset:t.data_offset + n])
        index.append((t.data_offset, t.n_bytes))
    arrays["index"] = np.array(index, np.int64)
    arrays["size"] = np.array([raw.size], np.int64)
    np.savez_compressed(dst, **arrays)
    print(f"{dst}: {os.path.getsize(dst) / 2**20:.1f} MiB for {raw.size / 2**20:.1f} MiB, "
          f"{len(index)} tensors")


def expand(skel: str, out: str) -> None:
    z = np.load(skel)
    with open(out, "wb") as f:
        f.write(z["header"].tobytes())
        for i, (offset, n) in enumerate(z["index"]):
            sample = z[f"t{i}"]
            f.seek(int(offset))
            f.write(np.resize(sample, int(n)).tobytes())  # the kept blocks repeated
        f.truncate(int(z["size"][0]))
    print(f"{out}: {os.path.getsize(out) / 2**20:.1f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("shrink")
    s.add_argument("src")
    s.add_argument("dst")
    s.add_argument("--keep", type=int, default=1 << 16, help="bytes kept of each tensor (whole blocks)")
    e = sub.add_parser("expand")
    e.add_argument("skel")
    e.add_argument("out")
    a = ap.parse_args()
    if a.cmd == "shrink":
        shrink(a.src, a.dst, a.keep)
    else:
        expand(a.skel, a.out)


if __name__ == "__main__":
    main()
