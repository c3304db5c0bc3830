"""The ``rlxc`` command (also ``python -m rlxc``).

    rlxc                          the no-download demo (same as ``rlxc demo``)
    rlxc info                     version, CPU features, kernel ISA, default threads
    rlxc run MODEL -p PROMPT      generate text, streamed, then tokens/s
    rlxc compare MODEL            layer-by-layer report against transformers on the same weights
    rlxc bench MODEL              prefill and decode tokens/s
    rlxc quantize IN OUT --type q4_0   HF folder or GGUF in, GGUF out

MODEL is a GGUF file or a Hugging Face checkpoint folder (``config.json`` + ``*.safetensors``),
read by :func:`rlxc.load`. Long steps show a progress bar on stderr (``--progress`` forces it
on when stderr is not a terminal, ``--no-progress`` off). An error prints one line and exits
with status 1 (2 for bad arguments); ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from typing import Any, Iterator, Sequence

import numpy as np

import rlxc

from .generate import checked_sampling
from .loaders import engine_wtypes
from .model import MATRIX_SLOTS, WEIGHT_FORMATS
from .report import hf_reference

__all__ = ["main", "build_demo_layers"]

COMMANDS = ("demo", "info", "run", "compare", "bench", "quantize", "perplexity")
DEFAULT_PROMPT = "The quick brown fox jumps over the lazy dog. The history of the printing press"


class CLIError(Exception):
    """An error whose message is shown as is (no exception type)."""


# ----------------------------------------------------------------------------- progress

def _bar(args: argparse.Namespace, **kw: Any) -> Any:
    """A tqdm bar on stderr (auto: only when stderr is a terminal, unless --progress/--no-progress)."""
    from tqdm import tqdm
    prog = getattr(args, "progress", None)
    disable = None if prog is None else (not prog)
    return tqdm(file=sys.stderr, disable=disable, dynamic_ncols=True, leave=False, **kw)


class _WindowBar:
    """A bar over windows, made when rlxc.evaluate knows how many (its ``progress`` callable),
    closed when the ``with`` block ends."""

    def __init__(self, args: argparse.Namespace, desc: str) -> None:
        self.args, self.desc, self.bar = args, desc, None

    def __call__(self, n: int) -> Any:
        self.bar = _bar(self.args, total=n, desc=self.desc, unit="window")
        return self.bar

    def __enter__(self) -> "_WindowBar":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()


class _Steps:
    """A progress bar over named steps: ``with steps("load model"): ...``."""

    def __init__(self, args: argparse.Namespace, names: Sequence[str], desc: str) -> None:
        self.bar = _bar(args, total=len(names), desc=desc, unit="step",
                        bar_format="{desc}: {n_fmt}/{total_fmt} {bar} {postfix} [{elapsed}]")

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.bar.set_postfix_str(name)
        yield
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- helpers

def _check_model_path(path: str) -> str:
    if not os.path.exists(path):
        raise CLIError(f"no such file or folder: {path}")
    return path


def _load(args: argparse.Namespace, path: str, weights: str | None, tokenizer: bool = True) -> Any:
    _check_model_path(path)
    kw: dict[str, Any] = dict(weights=weights, threads=args.threads, tokenizer=tokenizer,
                              activations=getattr(args, "activations", "q8"))
    if getattr(args, "max_seq", None):
        kw["max_seq"] = args.max_seq
    if getattr(args, "kv_type", None):
        kw["kv_type"] = args.kv_type
    return rlxc.load(path, **kw)


def _is_gguf(path: str) -> bool:
    if os.path.isdir(path):
        return not os.path.exists(os.path.join(path, "config.json"))
    with open(path, "rb") as f:
        return f.read(4) == b"GGUF"


def _parse_ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise CLIError(f"--ids must be integers separated by spaces or commas, got {text!r}") from None
    if not ids:
        raise CLIError("--ids is empty")
    return ids


def _prompt_ids(args: argparse.Namespace, model: Any, default_text: str | None, n_random: int = 16) -> list[int]:
    """Token ids from --ids, else the prompt text (chat template with --chat), else random ids."""
    if getattr(args, "ids", None):
        ids = _parse_ids(args.ids)
        bad = [i for i in ids if not 0 <= i < model.vocab_size]
        if bad:
            raise CLIError(f"token id {bad[0]} is out of range [0, {model.vocab_size})")
        return ids
    text = getattr(args, "prompt", None) or default_text
    tok = model.tokenizer
    if text is not None and tok is not None:
        if getattr(args, "chat", False):
            return list(tok.apply_chat_template([{"role": "user", "content": text}], tokenize=True))
        try:
            return list(tok.encode(text, add_special=True, parse_special=True))
        except ValueError:
            if getattr(args, "prompt", None):
                raise
            # the default text, and a vocabulary that cannot spell it (e.g. a placeholder one)
    if getattr(args, "prompt", None):
        raise CLIError("this model has no tokenizer (no tokenizer in the GGUF / folder): pass token ids with --ids")
    rng = np.random.default_rng(0)
    return [int(i) for i in rng.integers(0, model.vocab_size, size=n_random)]


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover


def _model_bytes(model: Any) -> int:
    """Bytes of the layer weights, the embedding and (untied) lm_head as held."""
    n = sum(int(layer.nbytes) for layer in model.layers) + int(model.embed.nbytes)
    lm = getattr(model, "_lm", None)
    if not model.tied and lm is not None:
        n += int(np.asarray(lm).nbytes)
    return n


def _matrix_types(model: Any) -> dict[str, int]:
    """Storage type -> number of layer matrices held in it."""
    out: dict[str, int] = {}
    for layer in model.layers:
        for s in MATRIX_SLOTS:
            t = layer.weight_type(s)
            if t is not None:
                out[t] = out.get(t, 0) + 1
    return out


# ----------------------------------------------------------------------------- demo

def build_demo_layers(hidden: int, layers: int, inter: int, dtype: str, seed: int) -> list[Any]:
    """A random Llama-shaped stack: alternating sliding (128) and full attention, GQA 4:1,
    head_dim 64, RoPE base 1e4 / 1e6, matrices in ``dtype``."""
    rng = np.random.default_rng(seed)
    head_dim = 64
    out = []
    for i in range(layers):
        layer = rlxc.Layer(hidden_size=hidden, intermediate_size=inter, head_dim=head_dim,
                           num_q_heads=hidden // head_dim, num_kv_heads=max(1, hidden // head_dim // 4),
                           rope_base=10000.0 if i % 2 == 0 else 1e6, sliding_window=128 if i % 2 == 0 else 0,
                           eps=1e-5)
        for name in layer.used_weights():
            shape = layer.weight_shape(name)
            w = rng.standard_normal(shape).astype(np.float32) * (1.0 if len(shape) == 1 else shape[1] ** -0.5)
            layer.set_weight(name, w, dtype if len(shape) == 2 else "f32")
        out.append(layer)
    return out


def cmd_demo(args: argparse.Namespace) -> int:
    if args.hidden % 64 or args.hidden < 64:
        raise CLIError("--hidden must be a positive multiple of 64 (heads of 64)")
    if args.layers < 1 or args.prompt < 1 or args.tokens < 1:
        raise CLIError("--layers, --prompt and --tokens must be >= 1")
    info = rlxc.cpu_info()
    print(f"rlxc {rlxc.__version__}: ISA {info['isa']} (available: {', '.join(info['available_isas'])}); "
          f"CPU features: {info['features']}")
    layers = build_demo_layers(args.hidden, args.layers, args.hidden * 3, args.dtype, seed=0)
    pipe = rlxc.Pipeline(layers, max_seq=args.prompt + args.tokens, threads=args.threads)
    print(pipe)
    mb = sum(layer.nbytes for layer in layers) / 1e6
    rng = np.random.default_rng(1)
    x = rng.standard_normal((args.prompt, args.hidden)).astype(np.float32)
    with _bar(args, total=args.tokens, desc="decode", unit="tok") as bar:  # made before the clock starts
        t0 = time.perf_counter()
        h = pipe.prefill(x)
        t1 = time.perf_counter()
        tok = h[-1]
        for i in range(args.tokens):
            tok = pipe.decode_token(tok / np.float32(np.sqrt(np.mean(tok * tok))), args.prompt + i)
            bar.update(1)
        t2 = time.perf_counter()
    print(f"weights {mb:.1f} MB ({args.dtype}); threads {pipe.threads}")
    print(f"prefill {args.prompt} tokens: {args.prompt / (t1 - t0):.1f} tokens/s")
    print(f"decode  {args.tokens} tokens: {args.tokens / (t2 - t1):.1f} tokens/s "
          f"({mb * args.tokens / (t2 - t1) / 1e3:.1f} GB/s of weights)")
    return 0


# ----------------------------------------------------------------------------- info

def _optional_versions() -> dict[str, str | None]:
    from importlib import metadata
    out: dict[str, str | None] = {}
    for name in ("numpy", "tqdm", "torch", "transformers", "matplotlib", "gguf"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def cmd_info(args: argparse.Namespace) -> int:
    info = rlxc.cpu_info()
    data = {
        "version": rlxc.__version__,
        "package": os.path.dirname(os.path.abspath(rlxc.__file__)),
        "python": sys.version.split()[0],
        "features": info["features"],
        "isa": info["isa"],
        "available_isas": list(info["available_isas"]),
        "default_threads": info.get("default_threads"),
        "amx": info.get("amx", False),
        "rlxc_isa_env": os.environ.get("RLXC_ISA"),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        "weight_types": sorted(engine_wtypes()),
        "packages": _optional_versions(),
    }
    model = None
    if args.model:
        args.threads = None
        model = _load(args, args.model, None, tokenizer=False)
        kv = model.kv_memory()
        data["model"] = {"name": model.name, "layers": len(model.layers), "hidden": model.hidden_size,
                         "vocab": model.vocab_size, "max_seq": model.max_seq, "kv_type": model.kv_type,
                         "kv_bytes_per_token": kv["per_token"], "kv_bytes_windowed": kv["windowed"],
                         "kv_bytes_at_max_seq": kv["at_max_seq"]}
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(f"rlxc {data['version']} (python {data['python']}, {data['package']})")
    print(f"CPU features:    {data['features'] or '(none detected)'}")
    isa_note = f"; forced by RLXC_ISA={data['rlxc_isa_env']}" if data["rlxc_isa_env"] else ""
    print(f"kernel ISA:      {data['isa']} (available: {', '.join(data['available_isas'])}{isa_note})")
    if data["amx"]:
        print("AMX tiles:       on for the Q4_0 / Q5_0 / Q8_0 GEMMs of the avx512 kernels (RLXC_AMX=0: off)")
    thr_note = f" (OMP_NUM_THREADS={data['omp_num_threads_env']})" if data["omp_num_threads_env"] else \
        " (physical cores in the affinity mask)"
    print(f"default threads: {data['default_threads']}{thr_note}")
    print(f"weight types:    {', '.join(data['weight_types'])}")
    pk = data["packages"]
    print("packages:        " + ", ".join(f"{k} {v}" if v else f"{k} (not installed)" for k, v in pk.items()))
    if model is not None:
        m = data["model"]
        print(f"model:           {model!r}")
        print(f"KV cache ({m['kv_type']}): {m['kv_bytes_per_token'] / 1024:.1f} KiB per token"
              + (f" + {m['kv_bytes_windowed'] / 1e6:.1f} MB for the windowed layers' rings" if m["kv_bytes_windowed"]
                 else "") + f"; {m['kv_bytes_at_max_seq'] / 1e6:.1f} MB at max_seq={m['max_seq']}")
    return 0


# ----------------------------------------------------------------------------- run

# Model.generate's sampling arguments -> rlxc run's options (named in the error messages)
_RUN_OPTIONS = {"temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p", "min_p": "--min-p",
                "repetition_penalty": "--repeat-penalty", "seed": "--seed"}


def cmd_run(args: argparse.Namespace) -> int:
    if not args.prompt and not args.ids:
        raise CLIError("give a prompt with -p TEXT (or token ids with --ids)")
    # checked before the model is loaded (Model.generate checks them again)
    checked_sampling(args.temperature, args.top_k, args.top_p, args.min_p, args.repeat_penalty, args.seed,
                     names=_RUN_OPTIONS)
    if args.max_tokens < 0:
        raise CLIError(f"-n/--max-tokens must be >= 0, got {args.max_tokens}")
    steps = _Steps(args, ["load", "tokenize"], "rlxc run")
    with steps("load model"):
        model = _load(args, args.model, args.weights)
    with steps("tokenize"):
        ids = _prompt_ids(args, model, None)
    steps.close()
    if len(ids) >= model.max_seq:
        raise CLIError(f"the prompt ({len(ids)} tokens) does not fit in max_seq={model.max_seq} (use --max-seq)")
    text = model.tokenizer is not None
    it = model.generate(ids, args.max_tokens, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                        min_p=args.min_p, repetition_penalty=args.repeat_penalty, seed=args.seed,
                        stop=args.stop or None, stream=True)
    out = sys.stdout
    if args.echo and args.prompt and text and not args.chat:
        out.write(args.prompt)
        out.flush()
    t0 = time.perf_counter()
    t_first = None
    n_pieces = 0
    for piece in it:
        if t_first is None:
            t_first = time.perf_counter()
        n_pieces += 1
        out.write(piece if text else f"{piece} ")
        out.flush()
    t_end = time.perf_counter()
    out.write("\n")
    out.flush()
    decoded = max(0, model.n_past - len(ids))  # tokens run through decode (the last sampled one is not)
    prefill_s = (t_first or t_end) - t0
    line = f"[prompt {len(ids)} tokens: {len(ids) / max(prefill_s, 1e-9):.1f} tokens/s (incl. the first sample)"
    if t_first is not None and decoded > 0:
        line += f"; generated {decoded + 1} tokens, decode {decoded / max(t_end - t_first, 1e-9):.1f} tokens/s"
    elif n_pieces:
        line += "; generated 1 token"
    else:
        line += "; generated nothing (an end-of-generation token came first)"
    _say(line + f"; {model.pipeline.threads} threads, ISA {_isa()}]")
    return 0


def _isa() -> str:
    return str(rlxc.get_isa())


# ----------------------------------------------------------------------------- compare

def cmd_compare(args: argparse.Namespace) -> int:
    path = _check_model_path(args.model)
    gguf = _is_gguf(path)
    weights = args.weights
    if weights == "stored":
        weights = None
    elif weights is None:
        weights = None if gguf else "f32"
    steps = _Steps(args, ["rlxc", "transformers", "tokens", "compare"], "rlxc compare")
    try:
        with steps("load with rlxc"):
            model = _load(args, path, weights)
        with steps("build the transformers model" + (" from the dequantized GGUF tensors" if gguf else "")):
            hf = hf_reference(path, threads=args.threads)
        with steps("tokens"):
            ids = _prompt_ids(args, model, DEFAULT_PROMPT, n_random=args.tokens)
        with steps("run both models"):
            tol = args.tol
            report = rlxc.compare(hf, model, np.asarray(ids), tol=tol)
    finally:
        steps.close()
    quantized = any(t != "f32" for t in _matrix_types(model))
    print(f"{args.model}: rlxc ({'weights as stored' if weights is None else 'weights ' + weights}) vs "
          f"transformers on the {'dequantized GGUF tensors' if gguf else 'checkpoint weights'}")
    print(report)
    if quantized and not report.ok and model.activations == "q8":
        print("note: quantized matrices multiply activations rounded to 8 bits (as llama.cpp does), so errors of "
              "~1e-3 per layer are expected; --activations f32 (the stored weights, float32 activations) or "
              "--weights f32 check the mapping itself at tol 1e-4")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"title": report.title, "tol": report.tol, "n_tokens": report.n_tokens, "ok": report.ok,
                       "first_bad": report.first_bad,
                       "rows": [dict(name=r.name, max_abs_err=r.max_abs_err, max_abs_ref=r.max_abs_ref,
                                     rel_err=r.rel_err, cosine=r.cosine, bad=r.bad) for r in report.rows]},
                      f, indent=2)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        ax = report.plot()
        ax.figure.tight_layout()
        ax.figure.savefig(args.plot, dpi=120)
        _say(f"plot written to {args.plot}")
    return 1 if (args.check and not report.ok) else 0


# ----------------------------------------------------------------------------- bench

def cmd_bench(args: argparse.Namespace) -> int:
    if args.prompt_tokens < 1 or args.decode_tokens < 0 or args.reps < 1:
        raise CLIError("--prompt-tokens and --reps must be >= 1, --decode-tokens >= 0")
    steps = _Steps(args, ["load"], "rlxc bench")
    with steps("load model"):
        need = args.prompt_tokens + args.decode_tokens + 1
        if not args.max_seq:
            args.max_seq = max(need, 256)
        model = _load(args, args.model, args.weights, tokenizer=False)
    steps.close()
    if need > model.max_seq:
        raise CLIError(f"--prompt-tokens + --decode-tokens = {need} exceeds max_seq={model.max_seq}")
    rng = np.random.default_rng(0)
    ids = [int(i) for i in rng.integers(0, model.vocab_size, size=args.prompt_tokens)]
    prefill: list[float] = []
    with _bar(args, total=args.reps, desc="prefill", unit="run") as bar:
        for _ in range(args.reps):
            model.reset()
            t0 = time.perf_counter()
            z = model.prefill(ids, logits="last")
            prefill.append(time.perf_counter() - t0)
            bar.update(1)
    decode: list[float] = []
    with _bar(args, total=args.decode_tokens, desc="decode", unit="tok") as bar:
        tok = int(np.argmax(z))
        for _ in range(args.decode_tokens):
            t0 = time.perf_counter()
            z = model.decode(tok)
            decode.append(time.perf_counter() - t0)
            tok = int(np.argmax(z))
            bar.update(1)
    threads = model.pipeline.threads
    res = {
        "model": args.model, "isa": _isa(), "threads": threads, "weights_bytes": _model_bytes(model),
        "prompt_tokens": args.prompt_tokens, "reps": args.reps,
        "prefill_tokens_per_s": args.prompt_tokens / min(prefill),
        "prefill_tokens_per_s_median": args.prompt_tokens / float(np.median(prefill)),
        "decode_tokens": args.decode_tokens,
        "decode_tokens_per_s": (len(decode) / sum(decode)) if decode else None,
        "decode_ms_per_token_median": float(np.median(decode)) * 1e3 if decode else None,
    }
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"{model!r}")
    print(f"ISA {res['isa']}, {threads} threads, weights {_fmt_bytes(res['weights_bytes'])}")
    print(f"prefill {args.prompt_tokens} tokens: {res['prefill_tokens_per_s']:.1f} tokens/s "
          f"(best of {args.reps}; median {res['prefill_tokens_per_s_median']:.1f})")
    if decode:
        print(f"decode  {args.decode_tokens} tokens: {res['decode_tokens_per_s']:.1f} tokens/s "
              f"(median {res['decode_ms_per_token_median']:.2f} ms/token, after a {args.prompt_tokens}-token prompt)")
    return 0


# ----------------------------------------------------------------------------- quantize

def cmd_quantize(args: argparse.Namespace) -> int:
    src = _check_model_path(args.input)
    if os.path.exists(args.output):
        if os.path.isdir(args.output):
            raise CLIError(f"{args.output} is a folder: give the output GGUF file's name")
        if not os.path.isdir(src) and os.path.samefile(src, args.output):
            raise CLIError("the output would overwrite the input (which is memory-mapped while it is read)")
        if not args.force:
            raise CLIError(f"{args.output} exists (use --force to overwrite it)")
    t0 = time.perf_counter()
    steps = _Steps(args, ["load", "write"], "rlxc quantize")
    try:
        with steps(f"load and convert to {args.type}"):
            model = rlxc.load(src, weights=args.type, threads=args.threads)
        tmp = args.output + ".part"
        with steps(f"write {args.output}"):
            try:
                rlxc.save(model, tmp)
                os.replace(tmp, args.output)
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)
    finally:
        steps.close()
    types = _matrix_types(model)
    in_size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(src) for f in fs) \
        if os.path.isdir(src) else os.path.getsize(src)
    print(f"{args.output}: {len(model.layers)} layers ({model.arch}), matrices "
          + ", ".join(f"{k} x{v}" for k, v in sorted(types.items()))
          + f", lm_head {model.lm_head_type}; {_fmt_bytes(in_size)} -> {_fmt_bytes(os.path.getsize(args.output))} "
          f"in {time.perf_counter() - t0:.1f} s")
    return 0


def _print_divergence(d: Any, what: str, args: argparse.Namespace) -> None:
    print(f"base PPL {d.ppl_base:.4f}, other PPL {d.ppl_other:.4f} over {d.tokens} tokens")
    q = d.kl_quantiles
    print(f"KL({what}): mean {d.kl:.6f} +/- {d.kl_stderr:.6f}, median {q['median']:.3g}, "
          f"p99 {q['p99']:.3g}, max {q['max']:.3g}; top-1 agreement {100 * d.top1:.2f} %")
    if d.drift:
        print(d.table())
    if args.plot and d.drift:
        import matplotlib
        matplotlib.use("Agg")
        d.plot().figure.savefig(args.plot, dpi=120, bbox_inches="tight")


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise CLIError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not text:
        raise CLIError(f"{path} is empty")
    return text


def cmd_perplexity(args: argparse.Namespace) -> int:
    from .evaluate import kl_divergence, perplexity, perplexity_ray
    from .llama_logits import kl_divergence_file, read_logits_file, save_logits

    bases = [o for o, v in (("--kl-against", args.kl_against), ("--kl-activations", args.kl_activations),
                            ("--hf", args.hf), ("--kl-base", args.kl_base)) if v]
    if len(bases) > 1:
        raise CLIError(f"{' and '.join(bases)}: give one thing to compare against")
    if args.ray and (bases or args.save_logits):
        raise CLIError(f"--ray computes perplexity only: drop {' '.join(bases) or '--save-logits'}")
    if args.save_logits and bases:
        raise CLIError(f"--save-logits writes a base: drop {bases[0]}")
    if args.plot and not (args.kl_against or args.kl_activations or args.hf):
        raise CLIError("--plot draws the per-layer drift of --kl-against, --kl-activations or --hf")
    if args.file is None and not args.kl_base:
        raise CLIError("give the text with -f FILE (only --kl-base FILE, which holds its tokens, goes without)")
    text = _read_text(args.file) if args.file is not None and not args.kl_base else ""
    if args.ctx < 4:
        raise CLIError(f"--ctx must be >= 4, got {args.ctx}")
    if args.batch is not None and args.batch < 1:
        raise CLIError(f"--batch must be >= 1, got {args.batch}")
    if args.kl_base:
        try:
            args.ctx = read_logits_file(args.kl_base).n_ctx
        except (OSError, ValueError) as e:
            raise CLIError(str(e)) from None
    args.max_seq = args.max_seq or args.ctx  # a window's cache is all it needs
    out: dict[str, Any] = {"model": args.model, "file": args.file}
    r = None
    try:
        if args.ray:
            _check_model_path(args.model)
            load = {k: v for k, v in dict(weights=args.weights, threads=args.threads, activations=args.activations,
                                          kv_type=args.kv_type, max_seq=args.max_seq).items() if v is not None}
            r = perplexity_ray(args.model, text, args.ctx, address=None if args.ray == "local" else args.ray,
                               workers=args.ray_workers, windows=args.windows, batch=args.batch, **load)
        else:
            model = _load(args, args.model, args.weights)
            if model.tokenizer is None and not args.kl_base:
                raise CLIError(f"{args.model} has no tokenizer to read the text with")
            out.update(activations=model.activations, kv_type=model.kv_type)
            kw = dict(windows=args.windows, batch=args.batch)
            if args.kl_base:
                with _WindowBar(args, "kl-divergence") as bar:
                    d = kl_divergence_file(model, args.kl_base, progress=bar, **kw)
                out["kl"] = d.as_dict()
                _print_divergence(d, f"{args.kl_base} || {args.model}", args)
            elif bases:
                if args.hf:
                    from .hf_reference import HFReference

                    base: Any = HFReference(args.hf, tokenizer=model.tokenizer)
                    other, what = model, f"transformers {args.hf} || {args.model}"
                else:
                    other = _load(args, args.kl_against, args.weights) if args.kl_against else model.fork()
                    if args.kl_activations:
                        other.activations = args.kl_activations
                    base, what = model, "base || other"
                with _WindowBar(args, "kl-divergence") as bar:
                    d = kl_divergence(base, other, text, args.ctx, progress=bar, **kw)
                out["kl"] = d.as_dict()
                _print_divergence(d, what, args)
            elif args.save_logits:
                with _WindowBar(args, "perplexity") as bar:
                    r = save_logits(model, text, args.save_logits, args.ctx, progress=bar, **kw)
                print(f"wrote {args.save_logits}: the distributions of {r.tokens} scored tokens "
                      f"(llama-perplexity's --kl-divergence-base format)")
            else:
                with _WindowBar(args, "perplexity") as bar:
                    r = perplexity(model, text, args.ctx, progress=bar, **kw)
    except ValueError as e:
        raise CLIError(str(e)) from None
    if r is not None:
        out.update(r.as_dict())
        print(f"perplexity: {r.ppl:.4f} +/- {r.ppl_stderr:.4f} over {r.tokens} tokens ({r.windows} windows of "
              f"{r.ctx}, second halves scored); {r.tokens_per_s:.1f} tokens/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


# ----------------------------------------------------------------------------- parser

def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="rlxc", description="rlxc: decoder-only LLMs on the CPU, every layer a Python object. "
        "Without a command: the no-download demo.",
        epilog="MODEL: a GGUF file or a Hugging Face checkpoint folder. 'rlxc COMMAND -h' for a command's options.")
    ap.add_argument("--version", action="version", version=f"rlxc {rlxc.__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the full traceback of an error")
    g = common.add_mutually_exclusive_group()
    g.add_argument("--progress", dest="progress", action="store_true", default=argparse.SUPPRESS,
                   help="show progress bars even when stderr is not a terminal")
    g.add_argument("--no-progress", dest="progress", action="store_false", default=argparse.SUPPRESS,
                   help="no progress bars")
    ap.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")

    def threads(p: argparse.ArgumentParser) -> None:
        p.add_argument("-t", "--threads", type=int, default=None, help="engine threads (default: the engine's)")

    def convert(p: argparse.ArgumentParser) -> None:
        p.add_argument("--weights", choices=list(WEIGHT_FORMATS), default=None,
                       help="convert matrices at load (default: GGUF as stored, HF folder q4_0)")
        p.add_argument("--max-seq", type=int, default=None, help="KV-cache length (default: the model's context)")
        p.add_argument("--kv-type", choices=["f32", "f16", "bf16", "q8_0"], default=None,
                       help="KV-cache storage (default: f16 for quantized models with q8 activations, else f32)")

    def activations(p: argparse.ArgumentParser) -> None:
        p.add_argument("--activations", choices=["q8", "f32"], default="q8",
                       help="how quantized matrices meet the activations: q8 = rounded to 8 bits for integer dots "
                       "(llama.cpp's numerics, the default), f32 = weight rows dequantized, float32 activations "
                       "(transformers' numerics on the dequantized weights)")

    p = sub.add_parser("demo", parents=[common], help="the no-download demo (the default)",
                       description="Builds a random Llama-shaped stack (alternating sliding and full attention, "
                       "GQA, quantized weights), prints its layers, prefills a prompt and times decoding.")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--dtype", default="q4_0", choices=["f32", "q4_0", "q8_0"])
    p.add_argument("--prompt", type=int, default=128, help="prompt tokens to prefill")
    p.add_argument("--tokens", type=int, default=64, help="tokens to decode")
    threads(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("info", parents=[common], help="version, CPU features, kernel ISA, default threads; with "
                       "MODEL, its layers and KV-cache memory")
    p.add_argument("model", metavar="MODEL", nargs="?", help="a GGUF file or HF folder to describe")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--max-seq", type=int, default=None, help="KV-cache length (default: the model's context)")
    p.add_argument("--kv-type", choices=["f32", "f16", "bf16", "q8_0"], default=None, help="KV-cache storage")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("run", parents=[common], help="generate text from a prompt (streamed), then tokens/s",
                       description="Loads MODEL with rlxc.load and streams Model.generate(stream=True) to stdout; "
                       "the speed goes to stderr.")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("-p", "--prompt", help="prompt text (special tokens written out, e.g. <start_of_turn>, are parsed)")
    p.add_argument("--ids", help="prompt as token ids ('1 2 3' or '1,2,3') instead of text")
    p.add_argument("--chat", action="store_true", help="wrap the prompt as one user turn with the chat template")
    p.add_argument("-n", "--max-tokens", type=int, default=128, help="tokens to generate at most (default 128)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    p.add_argument("--echo", action="store_true", help="print the prompt before the continuation")
    convert(p)
    threads(p)
    activations(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("compare", parents=[common], help="layer-by-layer report against transformers",
                       description="Runs MODEL with rlxc and with transformers on the same weights (an HF folder as "
                       "it is; a GGUF file dequantized to float32) and prints the per-layer errors. Needs torch and "
                       "transformers.")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("-p", "--prompt", help=f"prompt text (default: {DEFAULT_PROMPT!r}; random ids without a tokenizer)")
    p.add_argument("--ids", help="token ids instead of text")
    p.add_argument("--tokens", type=int, default=16, help="random ids when the model has no tokenizer (default 16)")
    p.add_argument("--weights", choices=["stored", *WEIGHT_FORMATS], default=None,
                   help="rlxc weights (default: GGUF as stored, HF folder f32)")
    p.add_argument("--tol", type=float, default=1e-4, help="relative error bound per row (default 1e-4)")
    p.add_argument("--check", action="store_true", help="exit with status 1 when a row is over tol")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the errors per layer (needs matplotlib)")
    p.add_argument("--max-seq", type=int, default=None)
    threads(p)
    activations(p)
    p.set_defaults(func=cmd_compare, chat=False)

    p = sub.add_parser("bench", parents=[common], help="prefill and decode tokens/s",
                       description="Times a prefill of random token ids (best of --reps) and greedy decoding "
                       "after it.")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--decode-tokens", type=int, default=32)
    p.add_argument("--reps", type=int, default=3, help="prefill repetitions (default 3)")
    convert(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    threads(p)
    activations(p)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("perplexity", parents=[common], help="perplexity of a text file, as llama-perplexity",
                       description="Tokenizes FILE (UTF-8) once, cuts it into windows of --ctx tokens (each starting "
                       "with BOS where the tokenizer adds one), runs each from an empty cache and scores its second "
                       "half: llama.cpp's llama-perplexity conventions, so the numbers compare.")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("-f", "--file", help="UTF-8 text file")
    p.add_argument("-c", "--ctx", type=int, default=512, help="tokens per window (default 512)")
    p.add_argument("-b", "--batch", type=int, default=None, help="at most B tokens per engine call (llama-perplexity's "
                   "-b; default: a window's first half at once)")
    p.add_argument("--windows", type=int, default=None, help="score at most this many windows")
    p.add_argument("--json", metavar="OUT", help="also write the result as JSON to OUT")
    p.add_argument("--kl-against", metavar="MODEL2", help="KL divergence of MODEL2 from MODEL (the base), top-1 "
                   "agreement and the per-layer drift of the residual stream, over the same windows")
    p.add_argument("--kl-activations", choices=["q8", "f32"], help="the same against MODEL itself run with these "
                   "activations (e.g. base --activations f32, --kl-activations q8: what 8-bit rounding costs)")
    p.add_argument("--hf", metavar="PATH", help="the same with transformers' float32 run of the HF checkpoint folder "
                   "PATH as the base (MODEL's tokenizer reads the text)")
    p.add_argument("--kl-base", metavar="LOGITS", help="KL divergence of MODEL from the distributions in a "
                   "llama-perplexity log-probability file (llama.cpp's --kl-divergence-base, or --save-logits), on "
                   "its tokens, windows and context (-f not needed)")
    p.add_argument("--save-logits", metavar="LOGITS", help="also write every scored distribution to LOGITS in "
                   "llama-perplexity's --kl-divergence-base format (llama-perplexity --kl-divergence reads it)")
    p.add_argument("--plot", metavar="PNG", help="with --kl-against/--kl-activations/--hf: the per-layer drift as a "
                   "plot (matplotlib)")
    p.add_argument("--ray", metavar="ADDRESS", help="share the windows over a Ray cluster ('local' starts one here; "
                   "MODEL must be readable at the same path on every node; pip install 'rlxc[ray]')")
    p.add_argument("--ray-workers", type=int, default=None, help="Ray tasks (default: the cluster's CPUs)")
    convert(p)
    threads(p)
    activations(p)
    p.set_defaults(func=cmd_perplexity)

    p = sub.add_parser("quantize", parents=[common], help="HF folder or GGUF in, quantized GGUF out",
                       description="rlxc.load(IN, weights=TYPE) then rlxc.save(OUT): layer matrices and the lm_head "
                       "in TYPE (those whose input width is not a multiple of 32 stay f32); a GGUF's embedding rows "
                       "keep their stored type.")
    p.add_argument("input", metavar="IN")
    p.add_argument("output", metavar="OUT")
    p.add_argument("--type", choices=list(WEIGHT_FORMATS), default="q4_0")
    p.add_argument("-f", "--force", action="store_true", help="overwrite OUT")
    threads(p)
    p.set_defaults(func=cmd_quantize)
    return ap


def _error_line(e: BaseException) -> str:
    if isinstance(e, CLIError):
        return str(e)
    if isinstance(e, FileNotFoundError):
        return f"no such file or folder: {e.filename or e}"
    if isinstance(e, NotImplementedError):
        msg = f"not supported: {e}"
    elif isinstance(e, ImportError):
        msg = str(e)
    elif isinstance(e, MemoryError):
        msg = "out of memory"
    else:
        msg = f"{type(e).__name__}: {e}" if not isinstance(e, (ValueError, OSError)) else str(e)
    lines = [ln for ln in msg.splitlines() if ln.strip()]
    return lines[0] + (" ..." if len(lines) > 1 else "") if lines else type(e).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not any(a in COMMANDS for a in args_list) and not any(a in ("-h", "--help", "--version") for a in args_list):
        args_list.insert(0, "demo")  # `rlxc`, `python -m rlxc`, `python -m rlxc --hidden 512`: the demo
    ap = _parser()
    args = ap.parse_args(args_list)
    if not hasattr(args, "progress"):
        args.progress = None
    debug = bool(getattr(args, "debug", False))
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        if debug:
            raise
        _say("rlxc: interrupted")
        return 130
    except BrokenPipeError:  # `rlxc run ... | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:  # pragma: no cover
            pass
        return 0
    except Exception as e:  # noqa: BLE001 - the one-line error is the point
        if debug:
            raise
        _say(f"rlxc {args.command}: error: {_error_line(e)}")
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
