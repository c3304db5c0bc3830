#!/usr/bin/env python
"""Bounded fuzzing of rlxc's file loaders (GGUF, safetensors and Hugging Face folders' JSON files
through rlxc.load).

    python tests/fuzz/run_fuzz.py --seconds 60 [--target gguf|safetensors|hf|all] [--seed N]
                                  [--engine mutate|atheris] [--out DIR]

Engines:
  mutate   (default, pure Python) structure-aware mutations of the seeds in formats.py (lying
           counts, lengths, types, dims, offsets, metadata values; see mutate.py) plus byte-level
           flips / truncations; for hf, mutations of config.json, generation_config.json,
           tokenizer_config.json and tokenizer.json (mutate.py's HF_MUTATORS). Each input runs in a forked child with a time limit, so a crash
           (signal, sanitizer abort) or hang is caught and the input saved while fuzzing goes on.
  atheris  coverage-guided libFuzzer (pip install atheris) over the GGUF target, seeded with the
           seeds, with the structured mutator mixed into libFuzzer's own; finds stop the run.

A finding (crash, hang, or an exception other than ValueError / NotImplementedError, the ones
rlxc.load documents) is written to --out (default tests/fuzz/findings/) as the input file and a
.txt with the traceback; exit status 1 if there was any. Under ASan (.ci/sanitize.sh) a
sanitizer report aborts the child and counts as a crash.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import formats  # noqa: E402
import mutate  # noqa: E402
import targets  # noqa: E402

EXIT_CLEAN, EXIT_OK, EXIT_UNEXPECTED = 0, 10, 11


def run_one(kind: str, data: bytes, work: str, weights) -> tuple[int, str]:
    """Run one input in the current process: (EXIT_* code, traceback text)."""
    try:
        if kind == "gguf":
            path = os.path.join(work, "input.gguf")
            with open(path, "wb") as f:
                f.write(data)
            targets.run_gguf(path, weights)
        elif kind == "hf":
            targets.run_hf(data, os.path.join(work, "hf"), weights or "f32")
        else:
            folder = os.path.join(work, "st")
            targets.prepare_folder(folder)
            with open(os.path.join(folder, "model.safetensors"), "wb") as f:
                f.write(data)
            targets.run_safetensors(folder, weights or "f32")
        return EXIT_OK, ""
    except targets.CLEAN:
        return EXIT_CLEAN, traceback.format_exc()
    except BaseException:  # noqa: BLE001 - anything else is a finding
        return EXIT_UNEXPECTED, traceback.format_exc()


def run_forked(kind: str, data: bytes, work: str, weights, timeout: float) -> tuple[str, str]:
    """Run one input in a forked child: ('clean' | 'ok' | 'unexpected' | 'crash' | 'hang', detail)."""
    tb_path = os.path.join(work, "tb.txt")
    if os.path.exists(tb_path):
        os.unlink(tb_path)
    pid = os.fork()
    if pid == 0:  # child
        code = EXIT_UNEXPECTED
        try:
            code, tb = run_one(kind, data, work, weights)
            if code == EXIT_UNEXPECTED:
                with open(tb_path, "w") as f:
                    f.write(tb)
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "hang", f"no result after {timeout:.0f} s"
        time.sleep(0.0005)
    if os.WIFSIGNALED(status):
        return "crash", f"killed by signal {os.WTERMSIG(status)} ({signal.Signals(os.WTERMSIG(status)).name})"
    code = os.WEXITSTATUS(status)
    if code == EXIT_CLEAN:
        return "clean", ""
    if code == EXIT_OK:
        return "ok", ""
    if code == EXIT_UNEXPECTED and os.path.exists(tb_path):
        with open(tb_path) as f:
            return "unexpected", f.read()
    return "crash", f"exit status {code} (a sanitizer report or an abort)"


def save_finding(out: str, kind: str, data: bytes, outcome: str, detail: str) -> str:
    os.makedirs(out, exist_ok=True)
    h = hashlib.sha1(data).hexdigest()[:12]
    ext = {"gguf": "gguf", "hf": "hf.json"}.get(kind, "safetensors")
    path = os.path.join(out, f"{outcome}-{h}.{ext}")
    with open(path, "wb") as f:
        f.write(data)
    with open(path + ".txt", "w") as f:
        f.write(f"{outcome}: {kind}\n{detail}\n")
    return path


def signature(detail: str) -> str:
    """The last frame and exception line of a traceback: one line per distinct finding."""
    lines = [ln for ln in detail.strip().splitlines() if ln.strip()]
    frames = [ln.strip() for ln in lines if ln.strip().startswith("File ")]
    return (frames[-1] if frames else "") + " | " + (lines[-1] if lines else "")


def fuzz_mutate(args) -> int:
    rng = np.random.default_rng(args.seed)
    gseeds, sseeds, hseeds = formats.seeds(), formats.st_seeds(), formats.hf_seeds()
    kinds = ["gguf", "safetensors", "hf"] if args.target == "all" else [args.target]
    targets.warm_up()
    work = tempfile.mkdtemp(prefix="rlxc-fuzz-")
    stats: dict[str, int] = {}
    findings: dict[str, str] = {}
    t_end = time.monotonic() + args.seconds
    n = 0
    while time.monotonic() < t_end and (args.runs <= 0 or n < args.runs):
        kind = kinds[int(rng.integers(len(kinds)))] if len(kinds) > 1 else kinds[0]
        if kind != "gguf" and rng.random() < 0.4 and len(kinds) > 1:
            kind = "gguf"  # GGUF gets ~3/5 of the time: it has far more structure
        if kind == "gguf":
            names = sorted(gseeds)
            # the large K-quant seeds are slower to mutate and run: pick them less often
            w = np.array([0.3 if "_k" in nm else 1.0 for nm in names])
            seed = gseeds[names[int(rng.choice(len(names), p=w / w.sum()))]]
            data = mutate.mutate_gguf(seed, rng)
            weights = None if rng.random() < 0.8 else mutate.pick(rng, ["q8_0", "q4_0", "f32"])
        elif kind == "hf":
            data = mutate.mutate_hf(hseeds[mutate.pick(rng, sorted(hseeds))], rng)
            weights = mutate.pick(rng, ["f32", "q8_0"])
        else:
            names = sorted(sseeds)
            data = mutate.mutate_safetensors(sseeds[names[int(rng.integers(len(names)))]], rng)
            weights = mutate.pick(rng, ["f32", "q8_0"])
        outcome, detail = run_forked(kind, data, work, weights, args.timeout)
        n += 1
        stats[f"{kind}:{outcome}"] = stats.get(f"{kind}:{outcome}", 0) + 1
        if outcome in ("unexpected", "crash", "hang"):
            sig = f"{kind} {outcome}: " + (signature(detail) if outcome == "unexpected" else detail)
            if sig not in findings:
                findings[sig] = save_finding(args.out, kind, data, outcome, detail)
                print(f"[{n}] NEW {sig}\n      -> {findings[sig]}", flush=True)
    elapsed = args.seconds - max(0.0, t_end - time.monotonic())
    print(f"fuzz: {n} inputs in {elapsed:.0f} s (seed {args.seed}): " +
          ", ".join(f"{k} {v}" for k, v in sorted(stats.items())))
    if findings:
        print(f"{len(findings)} distinct finding(s):")
        for sig, path in findings.items():
            print(f"  {sig}\n    {path}")
        fatal = [s for s in findings if " unexpected: " not in s] if args.fail_on == "crash" else list(findings)
        return 1 if fatal else 0
    print("no findings")
    return 0


def fuzz_atheris(args) -> int:  # pragma: no cover - optional engine
    import atheris
    with atheris.instrument_imports():
        import rlxc  # noqa: F401
        import rlxc.loaders  # noqa: F401
        import rlxc.tokenizer  # noqa: F401
    targets.warm_up()
    gseeds = formats.seeds()
    names = sorted(gseeds)
    seed_dir = tempfile.mkdtemp(prefix="rlxc-atheris-seeds-")
    for nm in names:
        with open(os.path.join(seed_dir, nm + ".gguf"), "wb") as f:
            f.write(gseeds[nm].to_bytes())
    work = tempfile.mkdtemp(prefix="rlxc-atheris-")
    rng = np.random.default_rng(args.seed)

    def one_input(data: bytes) -> None:
        code, tb = run_one("gguf", data, work, None)
        if code == EXIT_UNEXPECTED:
            raise RuntimeError("unexpected exception from rlxc.load:\n" + tb)

    def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
        r = np.random.default_rng(seed)
        if r.random() < 0.5:
            return atheris.Mutate(data, max_size)
        out = mutate.mutate_gguf(gseeds[names[int(r.integers(len(names)))]], r)
        return out[:max_size]

    del rng
    os.makedirs(args.out, exist_ok=True)
    argv = [sys.argv[0], f"-max_total_time={int(args.seconds)}", f"-timeout={int(args.timeout)}",
            f"-artifact_prefix={os.path.join(args.out, '')}", "-max_len=400000", f"-seed={args.seed or 1}",
            seed_dir]
    atheris.Setup(argv, one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--runs", type=int, default=0, help="stop after this many inputs (0: time only)")
    p.add_argument("--target", choices=["gguf", "safetensors", "hf", "all"], default="all")
    p.add_argument("--engine", choices=["mutate", "atheris"], default="mutate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=20, help="seconds one input may take")
    p.add_argument("--out", default=os.path.join(HERE, "findings"))
    p.add_argument("--fail-on", choices=["any", "crash"], default="any",
                   help="crash: exit 1 only for crashes, sanitizer reports and hangs (unexpected Python "
                        "exceptions are still reported and saved)")
    args = p.parse_args()
    if args.engine == "atheris":
        return fuzz_atheris(args)
    return fuzz_mutate(args)


if __name__ == "__main__":
    sys.exit(main())
