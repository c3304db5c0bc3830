"""GGUF and safetensors files and Hugging Face folders as editable structures, for seeds,
mutations and the corpus.

Independent of rlxc's own readers and writer: a GGUF is a list of metadata entries, a list of
tensor infos and the data block, and every length and count the file states can be overridden,
so a serialized structure can lie about itself (string lengths past the end, counts of 2**63,
offsets past the data, ...). A folder is its JSON documents (config.json, generation_config.json,
tokenizer.json, tokenizer_config.json) plus a safetensors seed. Everything is deterministic given
the numpy Generator passed in.
"""

from __future__ import annotations

import copy
import json
import math
import os
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12
_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q",
        I64: "<q", F64: "<d"}
# GGML tensor types: id -> (elements per block, bytes per block)
GGML = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 10: (256, 84),
        12: (256, 144), 14: (256, 210), 30: (1, 2)}
TYPE_ID = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q8_0": 8, "q2_k": 10, "q4_k": 12, "q6_k": 14,
           "bf16": 30}


def _as_int(value: Any) -> int:
    """An integer for any mutated value: a NaN or infinity put in an integer field by a
    mutation is written as its float64 bit pattern (still a lie for the parser to catch)."""
    if isinstance(value, float) and not math.isfinite(value):
        return struct.unpack("<q", struct.pack("<d", value))[0]
    return int(value)


@dataclass
class KV:
    key: str
    vtype: int
    value: Any
    etype: int | None = None        # arrays: element type
    key_len: int | None = None      # override of the stated key length
    count: int | None = None        # arrays: override of the stated element count
    str_len: int | None = None      # strings: override of the stated length


@dataclass
class Tensor:
    name: str
    dims: list[int]                 # GGML ne: dims[0] = columns
    ttype: int
    data: bytes
    offset: int | None = None       # override of the computed offset
    n_dims: int | None = None       # override of the stated dimension count
    name_len: int | None = None


@dataclass
class GGUF:
    kvs: list[KV] = field(default_factory=list)
    tensors: list[Tensor] = field(default_factory=list)
    version: int = 3
    magic: bytes = b"GGUF"
    n_tensors: int | None = None    # override of the stated counts
    n_kv: int | None = None
    alignment: int = 32             # what the writer pads to (general.alignment is a KV like any other)
    tail: bytes = b""               # appended after the data

    def copy(self) -> "GGUF":
        return copy.deepcopy(self)

    def kv(self, key: str) -> KV | None:
        for e in self.kvs:
            if e.key == key:
                return e
        return None

    def set(self, key: str, vtype: int, value: Any, etype: int | None = None) -> None:
        e = self.kv(key)
        if e is None:
            self.kvs.append(KV(key, vtype, value, etype))
        else:
            e.vtype, e.value, e.etype = vtype, value, etype

    def tensor(self, name: str) -> Tensor | None:
        for t in self.tensors:
            if t.name == name:
                return t
        return None

    # ------------------------------------------------------------------ writing
    @staticmethod
    def _s(s: str, n: int | None = None) -> bytes:
        b = s.encode("utf-8", "surrogateescape")
        return struct.pack("<Q", len(b) if n is None else n % 2**64) + b

    def _value(self, vtype: int, value: Any, etype: int | None, count: int | None, str_len: int | None) -> bytes:
        if vtype in _FMT:
            fmt = _FMT[vtype]
            if fmt in ("<f", "<d"):
                return struct.pack(fmt, float(value))
            if fmt == "<?":
                return struct.pack("<B", _as_int(value) & 0xFF)
            bits = struct.calcsize(fmt) * 8
            v = _as_int(value)
            if fmt[1].isupper():
                v %= 2**bits
            else:
                v = (v + 2**(bits - 1)) % 2**bits - 2**(bits - 1)
            return struct.pack(fmt, v)
        if vtype == STR:
            return self._s(str(value), str_len)
        if vtype == ARR:
            items = list(value)
            et = STR if etype is None else etype
            out = struct.pack("<I", et % 2**32) + struct.pack("<Q", (len(items) if count is None else count) % 2**64)
            return out + b"".join(self._value(et, v, None, None, None) if et != ARR else
                                  self._value(ARR, v[1], v[0], None, None) for v in items)
        # unknown value type: the value's bytes as given
        return bytes(value) if isinstance(value, (bytes, bytearray)) else b""

    def to_bytes(self) -> bytes:
        out = bytearray(self.magic)
        out += struct.pack("<I", self.version % 2**32)
        out += struct.pack("<Q", (len(self.tensors) if self.n_tensors is None else self.n_tensors) % 2**64)
        out += struct.pack("<Q", (len(self.kvs) if self.n_kv is None else self.n_kv) % 2**64)
        for e in self.kvs:
            out += self._s(e.key, e.key_len)
            out += struct.pack("<I", e.vtype % 2**32)
            out += self._value(e.vtype, e.value, e.etype, e.count, e.str_len)
        align = max(1, self.alignment)
        offsets, off = [], 0
        for t in self.tensors:
            offsets.append(off if t.offset is None else t.offset)
            off += len(t.data)
            off = (off + align - 1) // align * align
        for t, o in zip(self.tensors, offsets):
            out += self._s(t.name, t.name_len)
            out += struct.pack("<I", (len(t.dims) if t.n_dims is None else t.n_dims) % 2**32)
            out += b"".join(struct.pack("<Q", d % 2**64) for d in t.dims)
            out += struct.pack("<I", t.ttype % 2**32)
            out += struct.pack("<Q", o % 2**64)
        out += b"\0" * ((-len(out)) % align)
        base = len(out)
        for t in self.tensors:
            pad = (-(len(out) - base)) % align
            out += b"\0" * pad
            out += t.data
        return bytes(out) + self.tail


# ---------------------------------------------------------------------------- tensor bytes

def _f16(x: np.ndarray) -> bytes:
    return np.asarray(x, np.float16).tobytes()


def tensor_bytes(rng: np.random.Generator, ttype: int, cols: int, rows: int, scale: float = 0.1) -> bytes:
    """Plausible stored bytes: random weights of magnitude ~scale, quant blocks with finite scales."""
    if ttype == 0:
        return (rng.standard_normal(rows * cols) * scale).astype("<f4").tobytes()
    if ttype == 1:
        return (rng.standard_normal(rows * cols) * scale).astype("<f2").tobytes()
    if ttype == 30:
        f = (rng.standard_normal(rows * cols) * scale).astype("<f4")
        return (f.view("<u4") >> 16).astype("<u2").tobytes()
    block, size = GGML[ttype]
    n = rows * cols // block
    raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    d = np.frombuffer(_f16(np.full(n, scale / 8)), np.uint8).reshape(n, 2)
    if ttype in (2, 3, 6, 7, 8):  # d first (q4_1 / q5_1: d, m)
        raw[:, 0:2] = d
        if ttype in (3, 7):
            raw[:, 2:4] = d
    elif ttype in (10, 12):  # q2_k: scales, qs, d, dmin at the end; q4_k: d, dmin first
        if ttype == 12:
            raw[:, 0:2] = d
            raw[:, 2:4] = d
        else:
            raw[:, -4:-2] = d
            raw[:, -2:] = d
    elif ttype == 14:  # q6_k: d last
        raw[:, -2:] = d
    return raw.tobytes()


# ---------------------------------------------------------------------------- seeds

def _tokenizer_llama(g: GGUF, vocab: int) -> None:
    toks = ["<unk>", "<s>", "</s>", "\u2581"] + list("abcdefghijklmnopqrstuvwxyz") + ["\u2581a", "\u2581b", "ab"]
    toks = (toks + [f"<0x{i:02X}>" for i in range(256)])[:vocab]
    toks += [f"t{i}" for i in range(vocab - len(toks))]
    g.set("tokenizer.ggml.model", STR, "llama")
    g.set("tokenizer.ggml.tokens", ARR, toks, STR)
    g.set("tokenizer.ggml.scores", ARR, [-float(i) for i in range(vocab)], F32)
    g.set("tokenizer.ggml.token_type", ARR, [2, 3, 3] + [1] * (vocab - 3), I32)
    g.set("tokenizer.ggml.bos_token_id", U32, 1)
    g.set("tokenizer.ggml.eos_token_id", U32, 2)


def _tokenizer_gpt2(g: GGUF, vocab: int) -> None:
    chars = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u0120", "!", "."]
    toks = (chars + ["ab", "\u0120a", "abc"])[:vocab]
    toks += [f"x{i}" for i in range(vocab - len(toks))]
    g.set("tokenizer.ggml.model", STR, "gpt2")
    g.set("tokenizer.ggml.pre", STR, "default")
    g.set("tokenizer.ggml.tokens", ARR, toks, STR)
    g.set("tokenizer.ggml.token_type", ARR, [1] * vocab, I32)
    g.set("tokenizer.ggml.merges", ARR, ["a b", "\u0120 a", "ab c"], STR)
    g.set("tokenizer.ggml.bos_token_id", U32, 0)


def make_seed(arch: str = "llama", *, H: int = 32, F: int = 32, heads: int = 2, kv_heads: int = 1, layers: int = 1,
              vocab: int = 40, mtype: str = "f32", tokenizer: str | None = "llama", seed: int = 0,
              tied: bool = True) -> GGUF:
    """A small GGUF that rlxc.load accepts: `arch` layout, matrices stored as `mtype`."""
    rng = np.random.default_rng(seed)
    g = GGUF()
    g.set("general.architecture", STR, arch)
    g.set("general.name", STR, f"fuzz-{arch}-{mtype}")
    g.set("general.alignment", U32, 32)
    a = lambda k, t, v: g.set(f"{arch}.{k}", t, v)  # noqa: E731
    a("context_length", U32, 64)
    a("embedding_length", U32, H)
    a("block_count", U32, layers)
    a("feed_forward_length", U32, F)
    a("attention.head_count", U32, heads)
    a("attention.head_count_kv", U32, kv_heads)
    a("rope.freq_base", F32, 10000.0)
    if arch == "starcoder2":
        a("attention.layer_norm_epsilon", F32, 1e-5)
    else:
        a("attention.layer_norm_rms_epsilon", F32, 1e-6)
    if arch == "gemma2":
        a("attn_logit_softcapping", F32, 50.0)
        a("final_logit_softcapping", F32, 30.0)
        a("attention.sliding_window", U32, 4)
    if tokenizer == "llama":
        _tokenizer_llama(g, vocab)
    elif tokenizer == "gpt2":
        _tokenizer_gpt2(g, vocab)
    hd = H // heads
    mt = TYPE_ID[mtype]

    def add(name: str, dims: list[int], ttype: int = 0, scale: float = 0.1, offset: float = 0.0) -> None:
        cols, rows = dims[0], int(np.prod(dims[1:])) if len(dims) > 1 else 1
        data = tensor_bytes(rng, ttype, cols, rows, scale)
        if offset and ttype == 0:
            data = (np.frombuffer(data, "<f4") + offset).astype("<f4").tobytes()
        g.tensors.append(Tensor(name, list(dims), ttype, data))

    add("token_embd.weight", [H, vocab], mt if mt != 0 else 0, 1.0)
    add("output_norm.weight", [H], 0, 0.1, 1.0)
    if not tied:
        add("output.weight", [H, vocab], mt)
    if arch == "starcoder2":
        add("output_norm.bias", [H])
    for i in range(layers):
        b = f"blk.{i}."
        add(b + "attn_norm.weight", [H], 0, 0.1, 1.0)
        if arch == "phi3":
            add(b + "attn_qkv.weight", [H, H + 2 * kv_heads * hd], mt)
        else:
            add(b + "attn_q.weight", [H, H], mt)
            add(b + "attn_k.weight", [H, kv_heads * hd], mt)
            add(b + "attn_v.weight", [H, kv_heads * hd], mt)
        add(b + "attn_output.weight", [H, H], mt)
        add(b + "ffn_norm.weight", [H], 0, 0.1, 1.0)
        if arch == "phi3":
            add(b + "ffn_up.weight", [H, 2 * F], mt)
        elif arch == "starcoder2":
            add(b + "ffn_up.weight", [H, F], mt)
        else:
            add(b + "ffn_gate.weight", [H, F], mt)
            add(b + "ffn_up.weight", [H, F], mt)
        add(b + "ffn_down.weight", [F, H], mt if F % GGML[mt][0] == 0 else 0)
        if arch == "qwen3":
            add(b + "attn_q_norm.weight", [hd], 0, 0.1, 1.0)
            add(b + "attn_k_norm.weight", [hd], 0, 0.1, 1.0)
        if arch == "gemma2":
            add(b + "post_attention_norm.weight", [H], 0, 0.1, 1.0)
            add(b + "post_ffw_norm.weight", [H], 0, 0.1, 1.0)
        if arch == "starcoder2":
            for n, d in (("attn_norm.bias", H), ("ffn_norm.bias", H), ("attn_q.bias", H), ("attn_k.bias", kv_heads * hd),
                         ("attn_v.bias", kv_heads * hd), ("attn_output.bias", H), ("ffn_up.bias", F),
                         ("ffn_down.bias", H)):
                add(b + n, [d])
    return g


def seeds() -> dict[str, GGUF]:
    """The seed GGUFs, each accepted by rlxc.load (checked by tests/test_fuzz_regressions.py)."""
    return {
        "llama_f32": make_seed("llama"),
        "llama_q8_0_untied": make_seed("llama", H=64, F=64, heads=4, kv_heads=2, mtype="q8_0", tied=False, seed=1,
                                       layers=2),
        "qwen3_q4_0": make_seed("qwen3", H=64, F=32, heads=2, kv_heads=2, mtype="q4_0", seed=2, tokenizer="gpt2"),
        "gemma2_f16": make_seed("gemma2", H=32, F=64, heads=2, kv_heads=1, mtype="f16", seed=3, layers=2),
        "phi3_bf16": make_seed("phi3", H=32, F=32, heads=2, kv_heads=2, mtype="bf16", seed=4),
        "starcoder2_q5_0": make_seed("starcoder2", H=64, F=64, heads=4, kv_heads=1, mtype="q5_0", seed=5,
                                     tokenizer="gpt2"),
        "llama_q4_k": make_seed("llama", H=256, F=256, heads=2, kv_heads=1, mtype="q4_k", seed=6, vocab=8,
                                tokenizer=None),
        "qwen3_q6_k": make_seed("qwen3", H=256, F=256, heads=4, kv_heads=2, mtype="q6_k", seed=7, vocab=8,
                                tokenizer=None),
    }


# ---------------------------------------------------------------------------- safetensors

@dataclass
class Safetensors:
    header: dict
    data: bytes
    header_len: int | None = None   # override of the stated header length
    raw_header: bytes | None = None  # header bytes used as they are (not JSON-encoded)

    def copy(self) -> "Safetensors":
        return copy.deepcopy(self)

    def to_bytes(self) -> bytes:
        h = self.raw_header if self.raw_header is not None else json.dumps(self.header).encode()
        n = len(h) if self.header_len is None else self.header_len
        return struct.pack("<Q", n % 2**64) + h + self.data


ST_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}

# a tiny llama checkpoint: config.json and the names of its tensors
HF_CONFIG = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=16, intermediate_size=16,
                 num_attention_heads=2, num_key_value_heads=1, num_hidden_layers=1, vocab_size=16,
                 max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True,
                 hidden_act="silu", torch_dtype="float32")


def make_safetensors(dtype: str = "F32", seed: int = 0) -> Safetensors:
    rng = np.random.default_rng(seed)
    H, F, V = HF_CONFIG["hidden_size"], HF_CONFIG["intermediate_size"], HF_CONFIG["vocab_size"]
    hd = H // HF_CONFIG["num_attention_heads"] * HF_CONFIG["num_key_value_heads"]
    shapes = {"model.embed_tokens.weight": [V, H], "model.norm.weight": [H],
              "model.layers.0.input_layernorm.weight": [H], "model.layers.0.post_attention_layernorm.weight": [H],
              "model.layers.0.self_attn.q_proj.weight": [H, H], "model.layers.0.self_attn.k_proj.weight": [hd, H],
              "model.layers.0.self_attn.v_proj.weight": [hd, H], "model.layers.0.self_attn.o_proj.weight": [H, H],
              "model.layers.0.mlp.gate_proj.weight": [F, H], "model.layers.0.mlp.up_proj.weight": [F, H],
              "model.layers.0.mlp.down_proj.weight": [H, F]}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    data = bytearray()
    for name, shape in shapes.items():
        vals = rng.standard_normal(int(np.prod(shape))) * 0.1 + (1.0 if name.endswith("norm.weight") else 0.0)
        if dtype == "BF16":
            b = (vals.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
        else:
            b = vals.astype(ST_DTYPES[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    return Safetensors(header, bytes(data))


def st_seeds() -> dict[str, Safetensors]:
    return {"llama_f32": make_safetensors("F32"), "llama_bf16": make_safetensors("BF16", 1),
            "llama_f16": make_safetensors("F16", 2)}


# ---------------------------------------------------------------------------- Hugging Face folders

# the tokens of a word-level tokenizer.json for the tiny checkpoint's 16-token vocabulary
HF_TOKENS = ["<unk>", "<s>", "</s>", "a", "b", "c"] + [f"t{i}" for i in range(10)]


def tokenizer_json() -> dict:
    """A ``tokenizers`` word-level tokenizer.json (the format, written by hand: no library)."""
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, t in enumerate(HF_TOKENS[:3])]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
            "model": {"type": "WordLevel", "vocab": {t: i for i, t in enumerate(HF_TOKENS)}, "unk_token": "<unk>"}}


@dataclass
class HFFolder:
    """A checkpoint folder as an editable structure: JSON documents by file name (a document may be
    any JSON value, or raw text in ``raw``), and the seed of its model.safetensors by name
    (:func:`st_seeds`). ``to_bytes`` is one JSON archive of the folder, what the fuzzer mutates,
    saves and the corpus keeps (``*.hf.json``); :func:`write_folder` unpacks one."""
    docs: dict[str, Any]
    safetensors: str = "llama_f32"
    raw: dict[str, str] = field(default_factory=dict)

    def copy(self) -> "HFFolder":
        return copy.deepcopy(self)

    def to_bytes(self) -> bytes:
        files = {name: json.dumps(doc) for name, doc in self.docs.items()}
        files.update(self.raw)
        return json.dumps({"safetensors": self.safetensors, "files": files}, sort_keys=True, indent=0).encode()


def write_folder(archive: bytes, folder: str) -> None:
    """Unpack an :class:`HFFolder` archive into ``folder`` (which must exist)."""
    a = json.loads(archive)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(st_seeds()[a["safetensors"]].to_bytes())
    for name, text in a["files"].items():
        with open(os.path.join(folder, os.path.basename(name)), "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)


def hf_seeds() -> dict[str, HFFolder]:
    """Valid folders: the tiny llama with a tokenizer, generation config and chat template."""
    tok_cfg = {"bos_token": "<s>", "eos_token": {"content": "</s>"}, "add_bos_token": True,
               "chat_template": "{% for m in messages %}{{ m['content'] }} {% endfor %}"}
    full = {"config.json": dict(HF_CONFIG, bos_token_id=1, eos_token_id=2), "tokenizer.json": tokenizer_json(),
            "tokenizer_config.json": tok_cfg, "generation_config.json": {"bos_token_id": 1, "eos_token_id": [2, 5]}}
    named = dict(full, **{"tokenizer_config.json": dict(tok_cfg, chat_template=[
        {"name": "default", "template": "{{ messages[0]['content'] }}"}, {"name": "rag", "template": "x"}])})
    return {"llama_tok": HFFolder(full), "llama_tok_bf16": HFFolder(named, "llama_bf16"),
            "llama_config_only": HFFolder({"config.json": dict(HF_CONFIG)}, "llama_f16")}
