"""Structure-aware mutations of GGUF and safetensors files and of Hugging Face folders' JSON files
(see formats.py), plus byte-level ones.

Each mutator takes the structure and a numpy Generator and edits the structure in place; the
byte mutators take and return bytes. ``mutate_gguf`` / ``mutate_safetensors`` apply a few of
them at random and return the serialized file; ``mutate_hf`` edits config.json,
generation_config.json, tokenizer_config.json and tokenizer.json (values of every type, nested
configs, whole documents replaced or made invalid JSON) and returns the folder archive.
"""

from __future__ import annotations

import copy
import json
import math
import struct

import numpy as np

from formats import (ARR, BOOL, F32, F64, GGML, GGUF, HF_CONFIG, I32, I64, KV, STR, U32, U64, U8, Safetensors, Tensor,
                     tokenizer_json)

EDGE_U = [0, 1, 2, 3, 7, 31, 32, 33, 255, 256, 4096, 2**16, 2**24, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 1,
          2**40, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1]
EDGE_I = [-1, -2, -2**31, -2**63, 0, 1, 2**31 - 1]
EDGE_F = [0.0, -0.0, math.nan, math.inf, -math.inf, 1e-45, 3.4e38, -1.0, 1e-30, 0.5, 2.0]
ARCHS = ["llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "starcoder2", "phi3", "mamba", "", "llama\x00",
         "gemma4", "bert"]
ARCH_KEYS = ["context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
             "attention.head_count_kv", "attention.key_length", "attention.value_length", "rope.dimension_count",
             "rope.freq_base", "rope.freq_base_swa", "attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon",
             "attention.sliding_window", "attention.sliding_window_pattern", "rope.scaling.type",
             "rope.scaling.factor", "rope.scale_linear", "rope.scaling.original_context_length",
             "rope.scaling.attn_factor", "expert_count", "expert_used_count", "attn_logit_softcapping",
             "final_logit_softcapping"]
GLOBAL_KEYS = ["general.alignment", "general.architecture", "general.name", "tokenizer.ggml.model",
               "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
               "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
               "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix",
               "tokenizer.ggml.pre", "tokenizer.chat_template"]
TENSOR_NAMES = ["token_embd.weight", "output_norm.weight", "output_norm.bias", "output.weight", "rope_freqs.weight",
                "rope_factors_long.weight", "rope_factors_short.weight", "blk.0.attn_q.weight", "blk.0.attn_qkv.weight",
                "blk.0.attn_qkv.bias", "blk.0.ffn_gate.weight", "blk.0.attn_q_norm.weight", "blk.0.ffn_up.bias",
                "blk.1.attn_k.weight", "blk.99.attn_q.weight", "blk.-1.attn_q.weight", "blk.0.ffn_gate_exps.weight",
                "blk.0.post_ffw_norm.weight", "", "blk.0.attn_q.weight\x00", "\udcff"]
TYPES = sorted(GGML) + [4, 5, 9, 11, 13, 15, 16, 20, 24, 26, 28, 31, 39, 40, 255, 2**31, 2**32 - 1]


def pick(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


def edge_value(rng):
    """(vtype, value) of a random type and edge value."""
    k = int(rng.integers(7))
    if k == 0:
        return U32, pick(rng, EDGE_U)
    if k == 1:
        return I32, pick(rng, EDGE_I)
    if k == 2:
        return U64, pick(rng, EDGE_U)
    if k == 3:
        return F32, pick(rng, EDGE_F)
    if k == 4:
        return STR, pick(rng, ["", "x", "none", "linear", "yarn", "longrope", "llama", "gpt2", "\udcff", "9" * 30])
    if k == 5:
        n = pick(rng, [0, 1, 2, 3, 100])
        et = pick(rng, [U32, I32, F32, BOOL, STR, U8])
        vals = ["a", "", "b c"] if et == STR else [pick(rng, EDGE_U) if et == U32 else 1 for _ in range(3)]
        return ARR, (et, [vals[i % len(vals)] for i in range(n)])
    return BOOL, int(rng.integers(2))


def _set_kv(g: GGUF, key: str, vtype: int, value) -> None:
    if vtype == ARR:
        et, vals = value
        g.set(key, ARR, vals, et)
    else:
        g.set(key, vtype, value)


# ---------------------------------------------------------------------------- GGUF mutators

def m_counts(g: GGUF, rng):
    if rng.integers(2):
        g.n_tensors = pick(rng, EDGE_U + [len(g.tensors) + 1, max(len(g.tensors) - 1, 0)])
    else:
        g.n_kv = pick(rng, EDGE_U + [len(g.kvs) + 1, max(len(g.kvs) - 1, 0)])


def m_header(g: GGUF, rng):
    if rng.integers(3):
        g.version = pick(rng, [0, 1, 2, 4, 0x03000000, 2**31, 2**32 - 1])
    else:
        g.magic = pick(rng, [b"GGUF"[::-1], b"GGML", b"GGU\0", b"\0\0\0\0", b"GGJT"])


def m_kv_lengths(g: GGUF, rng):
    if not g.kvs:
        return
    e = pick(rng, g.kvs)
    what = int(rng.integers(3))
    if what == 0:
        e.key_len = pick(rng, EDGE_U + [len(e.key) + 1, max(len(e.key) - 1, 0)])
    elif what == 1 and e.vtype == STR:
        e.str_len = pick(rng, EDGE_U + [len(str(e.value)) + 1])
    elif e.vtype == ARR:
        e.count = pick(rng, EDGE_U + [len(e.value) + 1, max(len(e.value) - 1, 0)])


def m_kv_type(g: GGUF, rng):
    if not g.kvs:
        return
    e = pick(rng, g.kvs)
    if e.vtype == ARR and rng.integers(2):
        e.etype = pick(rng, [U8, I32, F32, STR, ARR, U64, 13, 99, 2**32 - 1])
        if e.etype == ARR:
            e.value = [(U32, [1, 2])] * min(len(e.value), 3)
        elif e.etype != STR:
            e.value = [0 if isinstance(v, str) else v for v in e.value]
        else:
            e.value = [str(v) for v in e.value]
        return
    vt = pick(rng, [U8, I32, F32, BOOL, STR, U64, I64, F64, 13, 99, 2**31])
    if vt == STR:
        e.value = str(e.value)[:50]
    elif vt in (13, 99, 2**31):
        e.value = b""
    elif not isinstance(e.value, (int, float)) or isinstance(e.value, bool):
        e.value = 7
    e.vtype = vt


def m_kv_value(g: GGUF, rng):
    arch = g.kv("general.architecture")
    arch = arch.value if arch is not None and isinstance(arch.value, str) else "llama"
    if rng.integers(3):
        key = f"{arch}.{pick(rng, ARCH_KEYS)}"
    else:
        key = pick(rng, GLOBAL_KEYS)
    if key == "general.architecture" and rng.integers(2):
        g.set(key, STR, pick(rng, ARCHS))
        return
    if key.startswith("tokenizer.ggml.") and key[15:] in ("tokens", "scores", "token_type", "merges") and rng.integers(2):
        e = g.kv(key)
        if e is not None and e.vtype == ARR:  # a shorter / longer / odd list
            n = len(e.value)
            e.value = list(e.value)[:int(rng.integers(0, n + 1))] if rng.integers(2) else list(e.value) * 2
            if e.etype == STR and e.value and rng.integers(2):
                e.value[int(rng.integers(len(e.value)))] = pick(rng, ["", "\udcff", "<0xZZ>", "<0x41>", " ", "\x00"])
            return
    if key.endswith(("head_count", "head_count_kv", "feed_forward_length", "key_length")) and rng.integers(3) == 0:
        # per-layer arrays of the wrong length or with bad entries
        bc = g.kv(f"{arch}.block_count")
        L = int(bc.value) if bc is not None and isinstance(bc.value, int) else 1
        L = min(L, 1024)  # an earlier mutation may have set a block count of 2**64 - 1: no list that long
        n = pick(rng, [0, L - 1 if L > 0 else 0, L, L + 1])
        g.set(key, ARR, [pick(rng, [0, 1, 2, 4, 2**31 - 1, 2**32 - 1]) for _ in range(n)], pick(rng, [U32, I32]))
        return
    _set_kv(g, key, *edge_value(rng))


def m_kv_delete_dup(g: GGUF, rng):
    if not g.kvs:
        return
    i = int(rng.integers(len(g.kvs)))
    if rng.integers(2):
        del g.kvs[i]
    else:
        g.kvs.insert(int(rng.integers(len(g.kvs) + 1)), KV(**vars(g.kvs[i])))


def m_tensor_dims(g: GGUF, rng):
    if not g.tensors:
        return
    t = pick(rng, g.tensors)
    what = int(rng.integers(5))
    if what == 0 and t.dims:
        t.dims[int(rng.integers(len(t.dims)))] = pick(rng, EDGE_U)
    elif what == 1:
        t.dims.append(pick(rng, [1, 2, 2**32, 2**63]))
    elif what == 2 and len(t.dims) > 1:
        t.dims.pop()
    elif what == 3:
        t.n_dims = pick(rng, [0, 5, 8, 2**31, 2**32 - 1])
    else:  # dims whose product overflows 64 bits or wraps to something small
        t.dims = pick(rng, [[2**32, 2**32], [2**33, 2**31 + 1], [32, 2**59], [2**63, 2], [2**64 - 1, 2**64 - 1],
                            [t.dims[0], 2**40], t.dims[::-1], [t.dims[0] * 2, max(t.dims[-1] // 2, 1)]])


def m_tensor_type(g: GGUF, rng):
    if g.tensors:
        pick(rng, g.tensors).ttype = pick(rng, TYPES)


def m_tensor_offset(g: GGUF, rng):
    if not g.tensors:
        return
    t = pick(rng, g.tensors)
    other = pick(rng, g.tensors)
    total = sum(len(x.data) + 32 for x in g.tensors)
    t.offset = pick(rng, EDGE_U + [1, 2, 16, total, total + 32, total - 32, 2**64 - 32, 2**63 - 32]) \
        if rng.integers(2) else (0 if other is t else None)
    if t.offset is None:
        # point at another tensor's data (overlap), computed like the writer does
        off = 0
        for x in g.tensors:
            if x is other:
                break
            off = (off + len(x.data) + 31) // 32 * 32
        t.offset = off


def m_tensor_name(g: GGUF, rng):
    if not g.tensors:
        return
    t = pick(rng, g.tensors)
    what = int(rng.integers(3))
    if what == 0:
        t.name = pick(rng, TENSOR_NAMES + [x.name for x in g.tensors])
    elif what == 1:
        t.name_len = pick(rng, EDGE_U + [len(t.name) + 1])
    else:
        t.name = t.name.replace("blk.0", pick(rng, ["blk.1", "blk.00", "blk. 0", "blk.0x", "blk.7"]))


def m_tensor_delete_dup(g: GGUF, rng):
    if not g.tensors:
        return
    i = int(rng.integers(len(g.tensors)))
    if rng.integers(2):
        del g.tensors[i]
    else:
        g.tensors.insert(int(rng.integers(len(g.tensors) + 1)), Tensor(**vars(g.tensors[i])))


def m_tensor_data(g: GGUF, rng):
    if not g.tensors:
        return
    t = pick(rng, g.tensors)
    d = bytearray(t.data)
    what = int(rng.integers(4))
    if what == 0 and d:
        t.data = bytes(d[:int(rng.integers(len(d)))])
    elif what == 1 and len(d) >= 2:  # non-finite halves / floats where scales live
        for _ in range(4):
            i = int(rng.integers(len(d) - 1))
            d[i:i + 2] = pick(rng, [b"\x00\x7c", b"\x00\xfc", b"\x01\x7e", b"\xff\xff"])
        t.data = bytes(d)
    elif what == 2 and d:
        for _ in range(8):
            d[int(rng.integers(len(d)))] = int(rng.integers(256))
        t.data = bytes(d)
    else:
        t.data = bytes(d) + bytes(int(rng.integers(1, 64)))


def m_alignment(g: GGUF, rng):
    v = pick(rng, [0, 1, 2, 3, 4, 8, 16, 64, 4096, 2**31, 2**32 - 1, -1])
    if rng.integers(2):
        g.set("general.alignment", pick(rng, [U32, U64, I32, F32, STR]), v if v >= 0 else 2**31)
    if v in (1, 2, 4, 8, 16, 64) and rng.integers(2):
        g.alignment = v
        g.set("general.alignment", U32, v)


def m_tail(g: GGUF, rng):
    g.tail = bytes(rng.integers(0, 256, size=int(rng.integers(1, 128)), dtype=np.uint8))


GGUF_MUTATORS = [m_counts, m_header, m_kv_lengths, m_kv_type, m_kv_value, m_kv_value, m_kv_value, m_kv_delete_dup,
                 m_tensor_dims, m_tensor_dims, m_tensor_type, m_tensor_offset, m_tensor_name, m_tensor_delete_dup,
                 m_tensor_data, m_alignment, m_tail]


# ---------------------------------------------------------------------------- byte mutators

def mutate_bytes(data: bytes, rng, n: int | None = None) -> bytes:
    d = bytearray(data)
    for _ in range(n or int(rng.integers(1, 4))):
        what = int(rng.integers(6))
        if not d:
            d += bytes(8)
        i = int(rng.integers(len(d)))
        if what == 0:
            d[i] ^= 1 << int(rng.integers(8))
        elif what == 1:
            d[i] = int(rng.integers(256))
        elif what == 2 and i + 8 <= len(d):
            d[i:i + 8] = struct.pack("<Q", pick(rng, EDGE_U))
        elif what == 3 and i + 4 <= len(d):
            d[i:i + 4] = struct.pack("<I", pick(rng, EDGE_U) % 2**32)
        elif what == 4:
            del d[i:i + int(rng.integers(1, 64))]
        else:
            d[i:i] = bytes(rng.integers(0, 256, size=int(rng.integers(1, 16)), dtype=np.uint8))
    return bytes(d)


def truncate(data: bytes, rng) -> bytes:
    return data[:int(rng.integers(len(data) + 1))]


def mutate_gguf(seed: GGUF, rng, max_mutations: int = 4) -> bytes:
    g = seed.copy()
    for _ in range(int(rng.integers(1, max_mutations + 1))):
        pick(rng, GGUF_MUTATORS)(g, rng)
    data = g.to_bytes()
    r = rng.random()
    if r < 0.2:
        data = mutate_bytes(data, rng)
    elif r < 0.27:
        data = truncate(data, rng)
    return data


# ---------------------------------------------------------------------------- safetensors mutators

ST_BAD_DTYPES = ["F64", "I64", "I32", "I16", "I8", "U8", "BOOL", "F8_E4M3", "Q4", "", "f32", 5, None, ["F32"]]
ST_BAD_SHAPES = [[-1], [2**63], [], [0], [1.5], ["a"], [[1]], [2**31, 2**31], [2**32, 2**32, 2**32], None, "32",
                 [16, 2], [32, 32, 1], [2**64]]


def s_entry(s: Safetensors, rng):
    names = [k for k in s.header if k != "__metadata__"]
    if not names:
        return
    name = pick(rng, names)
    e = s.header[name]
    if not isinstance(e, dict):
        s.header[name] = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}
        return
    what = int(rng.integers(6))
    if what == 0:
        e["dtype"] = pick(rng, ST_BAD_DTYPES + ["F16", "BF16", "F32"])
    elif what == 1:
        e["shape"] = pick(rng, ST_BAD_SHAPES)
    elif what == 2:
        offs = e.get("data_offsets")
        # (an earlier mutation may have left strings or floats there)
        b, end = offs if isinstance(offs, list) and len(offs) == 2 and all(type(o) is int for o in offs) else (0, 0)
        e["data_offsets"] = pick(rng, [[end, b], [b, end + 4], [b + 4, end + 4], [-4, end], [b, 2**63], [2**64, 2**64 + 4],
                                       [b], [b, end, 4], [str(b), end], [b + 0.5, end], None, [0, len(s.data)],
                                       [b - 2, end - 2]])
    elif what == 3:
        del e[pick(rng, list(e))]
    elif what == 4:
        s.header[name] = pick(rng, [None, [], "x", 1, {"dtype": "F32"}])
    else:
        new = pick(rng, ["model.layers.0.self_attn.qkv_proj.weight", "model.layers.0.mlp.gate_up_proj.weight",
                         "model.layers.5.mlp.up_proj.weight", "model.layers.0.foo.weight", "lm_head.weight",
                         "model.layers.0.layer_scalar", "model.embed_tokens.weight", "\udcff", ""])
        s.header[new] = s.header.pop(name)


def s_header(s: Safetensors, rng):
    what = int(rng.integers(5))
    h = json.dumps(s.header).encode()
    if what == 0:
        s.header_len = pick(rng, EDGE_U + [len(h) + 1, len(h) - 1, len(h) + len(s.data)])
    elif what == 1:
        s.raw_header = pick(rng, [b"[]", b"1", b'"x"', b"null", b"{", b"\xff\xfe{}", b"{" * 5000 + b"}" * 5000,
                                  h[:len(h) // 2], h.replace(b"F32", b"F\xff2"), h + b" " * 7, b"{}" + b"\0" * 8])
    elif what == 2:
        s.header["__metadata__"] = pick(rng, [None, 5, [], {"format": 5}, {"a": {"b": 1}}])
    elif what == 3:
        # duplicate keys survive only in raw JSON
        items = list(s.header.items())
        if items:
            k, v = items[int(rng.integers(len(items)))]
            s.raw_header = (json.dumps(dict(items))[:-1] + ", " + json.dumps(k) + ": " + json.dumps(v) + "}").encode()
    else:
        s.data = s.data[:int(rng.integers(len(s.data) + 1))]


ST_MUTATORS = [s_entry, s_entry, s_entry, s_header]


def mutate_safetensors(seed: Safetensors, rng, max_mutations: int = 3) -> bytes:
    s = seed.copy()
    for _ in range(int(rng.integers(1, max_mutations + 1))):
        pick(rng, ST_MUTATORS)(s, rng)
    data = s.to_bytes()
    r = rng.random()
    if r < 0.15:
        data = mutate_bytes(data, rng)
    elif r < 0.2:
        data = truncate(data, rng)
    return data


# ---------------------------------------------------------------------------- Hugging Face folder mutators

JSON_EDGE = [0, -1, 1, 2, 3, 7, 15, 16, 17, 32, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**63, 2**64, 10**30, 1.5, 16.0,
             -0.0, 1e-30, 1e308, math.nan, math.inf, -math.inf, "", "x", "16", "float32", "bfloat16", "auto", None,
             True, False, [], [1], [2, 5], [[1]], ["x"], [None], {}, {"a": 1}, {"content": 5}, "\udcff",
             [16] * 3, "9" * 40]
CONFIG_KEYS = sorted(HF_CONFIG) + [
    "head_dim", "dtype", "rope_scaling", "rope_parameters", "partial_rotary_factor", "sliding_window",
    "use_sliding_window", "layer_types", "attention_bias", "mlp_bias", "pretraining_tp", "num_local_experts",
    "bos_token_id", "eos_token_id", "pad_token_id", "text_config", "query_pre_attn_scalar",
    "final_logit_softcapping", "attn_logit_softcapping", "hidden_activation", "norm_epsilon", "use_bias"]
ROPE = [{"rope_type": "linear", "factor": 2.0}, {"rope_type": "linear"}, {"rope_type": "dynamic", "factor": 2.0},
        {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 8}, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
        {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4, "original_max_position_embeddings": 8},
        {"rope_type": "linear", "factor": math.nan}, {"type": "linear", "factor": -1}, {"rope_type": 5}]
MODEL_TYPES = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma3_text", "gemma4_text",
               "starcoder2", "phi3", "mamba", "", None, 5]
GEN_KEYS = ["eos_token_id", "bos_token_id", "pad_token_id", "max_length", "do_sample"]
TOKCFG_KEYS = ["bos_token", "eos_token", "chat_template", "add_bos_token", "model_max_length", "unk_token"]


def _json_value(rng, key: str):
    if key in ("rope_scaling", "rope_parameters") and rng.integers(2):
        return copy.deepcopy(pick(rng, ROPE))
    if key == "model_type" and rng.integers(2):
        return pick(rng, MODEL_TYPES)
    if key == "chat_template" and rng.integers(2):
        return pick(rng, [["x"], [{"name": "default"}], [{"name": "default", "template": 5}], [{}], "{{", "{% for %}",
                          [{"name": "default", "template": "{{ bos_token }}"}], "{{ raise_exception('no') }}"])
    if key.endswith("_token") and rng.integers(2):
        return pick(rng, [{"content": "<s>"}, {"content": None}, {"content": ["<s>"]}, "<nope>", "</s>", 5])
    if key == "layer_types" and rng.integers(2):
        return pick(rng, [["full_attention"], ["sliding_attention"], ["x"], [], ["full_attention"] * 2, [5]])
    return copy.deepcopy(pick(rng, JSON_EDGE))


def h_config_value(f, rng):
    if not f.docs:
        return
    doc = pick(rng, sorted(f.docs))
    d = f.docs[doc]
    if not isinstance(d, dict):
        f.docs[doc] = {}
        return
    keys = {"config.json": CONFIG_KEYS, "generation_config.json": GEN_KEYS,
            "tokenizer_config.json": TOKCFG_KEYS}.get(doc, list(d) or ["model"])
    key = pick(rng, keys)
    if rng.random() < 0.15 and key in d:
        del d[key]
    else:
        d[key] = _json_value(rng, key)


def h_nested_config(f, rng):
    """Gemma 3 / 4 style: the text model's fields in text_config (and some of them edited)."""
    cfg = f.docs.get("config.json")
    if not isinstance(cfg, dict):
        return
    text = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type")}
    text["model_type"] = pick(rng, ["gemma3_text", "gemma4_text", "llama"])
    if rng.integers(2):
        text[pick(rng, CONFIG_KEYS)] = _json_value(rng, "x")
    f.docs["config.json"] = {"model_type": pick(rng, ["gemma3", "gemma4"]), "text_config": text}


def h_tokenizer_json(f, rng):
    t = f.docs.get("tokenizer.json")
    if not isinstance(t, dict):
        f.docs["tokenizer.json"] = tokenizer_json()
        return
    what = int(rng.integers(5))
    model = t.get("model")
    if what == 0 and isinstance(model, dict) and isinstance(model.get("vocab"), dict):
        vocab = model["vocab"]
        k = pick(rng, sorted(vocab))
        vocab[k] = pick(rng, [-1, 2**31, 10**6, 0, "x", None, 1.5])
    elif what == 1 and isinstance(t.get("added_tokens"), list) and t["added_tokens"]:
        e = pick(rng, t["added_tokens"])
        e[pick(rng, ["id", "content", "special"])] = _json_value(rng, "x")
    elif what == 2 and isinstance(model, dict):
        model["type"] = pick(rng, ["BPE", "Unigram", "WordPiece", "x", 5])
    elif what == 3:
        t[pick(rng, ["pre_tokenizer", "decoder", "normalizer", "post_processor"])] = pick(
            rng, [None, {"type": "x"}, {"type": "ByteLevel"}, 5, []])
    else:
        t["model"] = pick(rng, [None, {}, [], "x"])


def h_document(f, rng):
    """A whole document replaced, removed, or made invalid JSON / UTF-8."""
    name = pick(rng, sorted(set(f.docs) | {"generation_config.json", "tokenizer_config.json", "chat_template.jinja"}))
    what = int(rng.integers(4))
    if what == 0:
        f.docs[name] = pick(rng, [[], [1, 2], "x", 5, None, [[{}]]])
    elif what == 1 and name in f.docs and name != "config.json":
        del f.docs[name]
    else:
        text = json.dumps(f.docs.get(name, {}))
        f.docs.pop(name, None)
        f.raw[name] = pick(rng, [text[:len(text) // 2], text + "}", "[" * 5000 + "]" * 5000, "\udcff", "",
                                 "{{ messages }}", text.replace('"', "'", 1)])


HF_MUTATORS = [h_config_value, h_config_value, h_config_value, h_config_value, h_nested_config, h_tokenizer_json,
               h_document]


def mutate_hf(seed, rng, max_mutations: int = 3) -> bytes:
    f = seed.copy()
    for _ in range(int(rng.integers(1, max_mutations + 1))):
        pick(rng, HF_MUTATORS)(f, rng)
    if rng.random() < 0.1 and f.docs:
        name = pick(rng, sorted(f.docs))
        f.raw[name] = mutate_bytes(json.dumps(f.docs.pop(name)).encode(), rng).decode("utf-8", "surrogateescape")
    return f.to_bytes()
