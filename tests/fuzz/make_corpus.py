#!/usr/bin/env python
"""Write the regression corpus: malformed and edge-case GGUF / safetensors files and Hugging Face
folders (``*.hf.json``: config.json, generation_config.json and tokenizer files, formats.HFFolder),
one recipe each.

    python tests/fuzz/make_corpus.py [--out tests/fuzz/corpus]

Deterministic: tests/test_fuzz_regressions.py regenerates the corpus and requires the files it
finds checked in to be byte-identical, then loads each one. Every recipe names what it
exercises; ``EXPECT`` says what must happen:

  error   rlxc.load raises ValueError or NotImplementedError (the documented exceptions)
  runs    rlxc.load may refuse it (ValueError / NotImplementedError), and if it loads, a forward
          pass and the tokenizer must work (NaN logits allowed): these reached the C engine with
          misaligned or non-finite data

``KNOWN_BUGS`` are inputs the fuzzer found that currently raise an undocumented exception
(TypeError, IndexError, ...) in the loaders (python/rlxc/gguf*.py, hf_folder.py, ...) or tokenizer.py; the test marks
them xfail with the exception seen, until the loaders validate these fields.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

from formats import (ARR, BOOL, F32, GGUF, I32, I64, KV, STR, U8, U32, U64, HFFolder, Safetensors, Tensor,  # noqa: E402
                     hf_seeds, make_safetensors, make_seed, tensor_bytes)

RECIPES: dict[str, tuple[str, object]] = {}  # file name -> (expect, () -> bytes)
KNOWN_BUGS: dict[str, str] = {}              # file name -> where it fails today


def recipe(name: str, expect: str = "error", bug: str | None = None):
    def deco(fn):
        RECIPES[name] = (expect, fn)
        if bug:
            KNOWN_BUGS[name] = bug
        return fn
    return deco


def tiny() -> GGUF:
    """The corpus base: a one-layer llama with q8_0 matrices and an SPM vocabulary (~8 KB)."""
    return make_seed("llama", H=32, F=32, heads=2, kv_heads=1, vocab=32, mtype="q8_0", seed=11)


def tiny_gpt2() -> GGUF:
    return make_seed("qwen3", H=32, F=32, heads=2, kv_heads=1, vocab=32, mtype="f16", seed=12, tokenizer="gpt2")


def edit(g: GGUF, **kw) -> bytes:
    for k, v in kw.items():
        setattr(g, k, v)
    return g.to_bytes()


# ============================================================================ GGUF: header

recipe("gguf_empty.gguf")(lambda: b"")
recipe("gguf_magic_only.gguf")(lambda: b"GGUF")
recipe("gguf_header_truncated.gguf")(lambda: tiny().to_bytes()[:20])
recipe("gguf_bad_magic.gguf")(lambda: edit(tiny(), magic=b"GGML"))
recipe("gguf_version_0.gguf")(lambda: edit(tiny(), version=0))
recipe("gguf_version_1.gguf")(lambda: edit(tiny(), version=1))
recipe("gguf_version_big_endian.gguf")(lambda: edit(tiny(), version=0x03000000))
recipe("gguf_tensor_count_huge.gguf")(lambda: edit(tiny(), n_tensors=2**63))
recipe("gguf_tensor_count_max.gguf")(lambda: edit(tiny(), n_tensors=2**64 - 1))
recipe("gguf_tensor_count_plus_one.gguf")(lambda: edit(tiny(), n_tensors=len(tiny().tensors) + 1))
recipe("gguf_kv_count_huge.gguf")(lambda: edit(tiny(), n_kv=2**62))
recipe("gguf_kv_count_plus_one.gguf")(lambda: edit(tiny(), n_kv=len(tiny().kvs) + 1))


# ============================================================================ GGUF: truncation

def _cut(frac_or_where):
    def make():
        g = tiny()
        b = g.to_bytes()
        data_start = len(b) - sum(len(t.data) for t in g.tensors) - _pad_total(g)
        where = {"kv": 200, "tensor_infos": data_start - 100, "data_start": data_start + 4,
                 "last_byte": len(b) - 1}[frac_or_where]
        return b[:where]
    return make


def _pad_total(g: GGUF) -> int:
    """Padding between tensors in g's data block (the data block starts aligned)."""
    pad, off = 0, 0
    for t in g.tensors:
        p = (-off) % g.alignment
        pad += p
        off += p + len(t.data)
    return pad


for _w in ("kv", "tensor_infos", "data_start", "last_byte"):
    recipe(f"gguf_truncated_in_{_w}.gguf")(_cut(_w))


# ============================================================================ GGUF: metadata encoding

def _kv_edit(key: str, **kw):
    def make():
        g = tiny()
        e = g.kv(key)
        for k, v in kw.items():
            setattr(e, k, v)
        return g.to_bytes()
    return make


recipe("gguf_key_length_huge.gguf")(_kv_edit("general.name", key_len=2**63))
recipe("gguf_key_length_past_end.gguf")(_kv_edit("general.name", key_len=10**6))
recipe("gguf_string_length_max.gguf")(_kv_edit("general.name", str_len=2**64 - 1))
recipe("gguf_string_length_past_end.gguf")(_kv_edit("general.name", str_len=10**7))
recipe("gguf_array_count_huge.gguf")(_kv_edit("tokenizer.ggml.tokens", count=2**62))
recipe("gguf_array_count_past_end.gguf")(_kv_edit("tokenizer.ggml.scores", count=10**6))
recipe("gguf_unknown_value_type.gguf")(_kv_edit("general.name", vtype=99, value=b"abcd"))
recipe("gguf_unknown_array_type.gguf")(_kv_edit("tokenizer.ggml.scores", etype=77))


@recipe("gguf_arrays_nested_deep.gguf")
def _():
    g = tiny()
    v = (U32, [1])
    for _ in range(6):
        v = (ARR, [v])
    g.kvs.append(KV("general.nested", ARR, v[1], v[0]))
    return g.to_bytes()


@recipe("gguf_nested_array_count_huge.gguf")
def _():
    g = tiny()
    g.kvs.append(KV("general.nested", ARR, [(U32, [1])] * 2, ARR, count=2**61))
    return g.to_bytes()


# ============================================================================ GGUF: tensor infos

def _tensor_edit(tname: str, **kw):
    def make():
        g = tiny()
        t = g.tensor(tname)
        for k, v in kw.items():
            setattr(t, k, v)
        return g.to_bytes()
    return make


Q = "blk.0.attn_q.weight"
recipe("gguf_tensor_name_length_huge.gguf")(_tensor_edit(Q, name_len=2**63 + 5))
recipe("gguf_tensor_ndims_0.gguf")(_tensor_edit(Q, n_dims=0, dims=[]))
recipe("gguf_tensor_ndims_5.gguf")(_tensor_edit(Q, dims=[32, 32, 1, 1, 1]))
recipe("gguf_tensor_ndims_huge.gguf")(_tensor_edit(Q, n_dims=2**32 - 1))
recipe("gguf_tensor_dim_zero.gguf")(_tensor_edit(Q, dims=[32, 0]))
recipe("gguf_tensor_dims_product_overflows_u64.gguf")(_tensor_edit(Q, dims=[2**32, 2**32]))
recipe("gguf_tensor_dims_product_wraps_small.gguf")(_tensor_edit(Q, dims=[32, 2**59]))
recipe("gguf_tensor_dims_product_exceeds_file.gguf")(_tensor_edit(Q, dims=[32, 2**30]))
recipe("gguf_tensor_dim_max.gguf")(_tensor_edit(Q, dims=[2**64 - 1, 1]))
recipe("gguf_tensor_type_unknown.gguf")(_tensor_edit(Q, ttype=99))
recipe("gguf_tensor_type_max.gguf")(_tensor_edit(Q, ttype=2**32 - 1))
recipe("gguf_tensor_type_q2_k_partial_block.gguf")(  # rows of 32 in blocks of 256
    lambda: _typed(Q, 10))
recipe("gguf_tensor_cols_not_whole_blocks.gguf")(_tensor_edit(Q, dims=[33, 32]))
recipe("gguf_tensor_offset_past_end.gguf")(_tensor_edit(Q, offset=10**7))
recipe("gguf_tensor_offset_huge.gguf")(_tensor_edit(Q, offset=2**64 - 32))
recipe("gguf_tensor_offset_misaligned.gguf")(_tensor_edit(Q, offset=1))
recipe("gguf_tensor_overlaps_another.gguf")(_tensor_edit(Q, offset=0))


def _typed(name: str, ttype: int) -> bytes:
    g = tiny()
    t = g.tensor(name)
    t.ttype = ttype
    t.data = tensor_bytes(np.random.default_rng(0), ttype, t.dims[0], t.dims[1])
    return g.to_bytes()


@recipe("gguf_tensor_duplicate_name.gguf")
def _():
    g = tiny()
    g.tensors.append(Tensor(Q, list(g.tensor(Q).dims), g.tensor(Q).ttype, g.tensor(Q).data))
    return g.to_bytes()


@recipe("gguf_tensor_unknown_name.gguf")
def _():
    g = tiny()
    g.tensors.append(Tensor("blk.0.ffn_gate_exps.weight", [32, 8], 0, bytes(32 * 8 * 4)))
    return g.to_bytes()


recipe("gguf_tensor_layer_out_of_range.gguf")(_tensor_edit("blk.0.ffn_gate.weight", name="blk.7.ffn_gate.weight"))
recipe("gguf_tensor_missing.gguf")(lambda: _drop("blk.0.attn_k.weight"))
recipe("gguf_token_embd_missing.gguf")(lambda: _drop("token_embd.weight"))
recipe("gguf_output_norm_missing.gguf")(lambda: _drop("output_norm.weight"))
recipe("gguf_tensor_wrong_shape.gguf")(_tensor_edit("blk.0.attn_k.weight", dims=[32, 32],
                                                    data=bytes(32 * 34)))
recipe("gguf_token_embd_wrong_width.gguf")(lambda: _retensor("token_embd.weight", [64, 20]))


def _drop(name: str) -> bytes:
    g = tiny()
    g.tensors = [t for t in g.tensors if t.name != name]
    return g.to_bytes()


def _retensor(name: str, dims: list[int], ttype: int = 0) -> bytes:
    g = tiny()
    t = g.tensor(name)
    t.dims, t.ttype = dims, ttype
    t.data = tensor_bytes(np.random.default_rng(1), ttype, dims[0], int(np.prod(dims[1:])))
    return g.to_bytes()


# ============================================================================ GGUF: alignment

def _align(vtype: int, value, writer: int | None = None):
    def make():
        g = tiny()
        g.set("general.alignment", vtype, value)
        if writer:
            g.alignment = writer
        return g.to_bytes()
    return make


recipe("gguf_alignment_0.gguf")(_align(U32, 0))
recipe("gguf_alignment_3.gguf")(_align(U32, 3))
recipe("gguf_alignment_string.gguf")(_align(STR, "32"))
recipe("gguf_alignment_2_pow_31.gguf")(_align(U32, 2**31))
recipe("gguf_alignment_u64_max.gguf")(_align(U64, 2**64 - 1))
recipe("gguf_alignment_1_unaligned_data.gguf", "runs")(_align(U32, 1, writer=1))
recipe("gguf_alignment_2_shifts_data.gguf", "runs")(_align(U32, 2))  # the file is padded to 32: data read shifted


# ============================================================================ GGUF: model metadata

def _meta(key: str, vtype: int, value, etype: int | None = None, base=tiny):
    def make():
        g = base()
        arch = g.kv("general.architecture").value
        g.set(key.replace("ARCH", arch), vtype, value, etype)
        return g.to_bytes()
    return make


def _del_meta(key: str):
    def make():
        g = tiny()
        g.kvs = [e for e in g.kvs if e.key != key]
        return g.to_bytes()
    return make


recipe("gguf_arch_unsupported.gguf")(_meta("general.architecture", STR, "mamba"))
recipe("gguf_arch_missing.gguf")(_del_meta("general.architecture"))
recipe("gguf_arch_not_a_string.gguf")(_meta("general.architecture", U32, 5))
recipe("gguf_block_count_missing.gguf")(_del_meta("llama.block_count"))
recipe("gguf_block_count_huge.gguf")(_meta("ARCH.block_count", U64, 2**62))
recipe("gguf_block_count_2_pow_32_gemma2.gguf")(  # hung: a list of 2**32 sliding-window flags per layer
    _meta("ARCH.block_count", U64, 2**32, base=lambda: make_seed("gemma2", H=32, F=64, mtype="f16", seed=3)))
recipe("gguf_block_count_zero.gguf", "runs")(_meta("ARCH.block_count", U32, 0))
recipe("gguf_head_count_zero.gguf")(_meta("ARCH.attention.head_count", U32, 0))
recipe("gguf_head_count_huge.gguf")(_meta("ARCH.attention.head_count", U32, 2**31))
recipe("gguf_head_count_kv_not_dividing.gguf")(_meta("ARCH.attention.head_count_kv", U32, 3))
recipe("gguf_head_count_per_layer_too_short.gguf")(_meta("ARCH.attention.head_count", ARR, [], U32))
recipe("gguf_embedding_length_mismatch.gguf")(_meta("ARCH.embedding_length", U32, 64))
recipe("gguf_embedding_length_zero.gguf")(_meta("ARCH.embedding_length", U32, 0))
recipe("gguf_feed_forward_length_mismatch.gguf")(_meta("ARCH.feed_forward_length", U32, 48))
recipe("gguf_key_length_odd.gguf")(_meta("ARCH.attention.key_length", U32, 15))
recipe("gguf_rope_dims_past_head_dim.gguf")(_meta("ARCH.rope.dimension_count", U32, 64))
recipe("gguf_rope_base_negative.gguf")(_meta("ARCH.rope.freq_base", F32, -1.0))
@recipe("gguf_rope_scaling_unknown.gguf")
def _():
    g = tiny()
    g.set("llama.rope.scaling.type", STR, "yarn-ish")
    g.set("llama.rope.scaling.factor", F32, 4.0)
    return g.to_bytes()
recipe("gguf_context_length_huge.gguf", "runs")(_meta("ARCH.context_length", U64, 2**62))
recipe("gguf_eps_zero.gguf")(_meta("ARCH.attention.layer_norm_rms_epsilon", F32, 0.0))
recipe("gguf_eps_nan.gguf")(_meta("ARCH.attention.layer_norm_rms_epsilon", F32, float("nan")))
recipe("gguf_expert_count.gguf")(_meta("ARCH.expert_count", U32, 8))
recipe("gguf_tokenizer_model_unknown.gguf")(_meta("tokenizer.ggml.model", STR, "rwkv"))
recipe("gguf_tokenizer_tokens_missing.gguf")(_del_meta("tokenizer.ggml.tokens"))
recipe("gguf_tokenizer_gpt2_without_merges.gguf")(lambda: _drop_gpt2_merges())
recipe("gguf_tokenizer_bad_merge.gguf")(_meta("tokenizer.ggml.merges", ARR, ["ab"], STR, base=tiny_gpt2))


def _drop_gpt2_merges() -> bytes:
    g = tiny_gpt2()
    g.kvs = [e for e in g.kvs if e.key != "tokenizer.ggml.merges"]
    return g.to_bytes()


# metadata values of the wrong type / shape (most found by the fuzzer): rlxc.loaders.gguf_meta checks
# the type of every value read, the tokenizers the lengths of the per-token arrays and the merges
recipe("gguf_embedding_length_array.gguf")(
    _meta("ARCH.embedding_length", ARR, [2**32 - 1, 255], U32))
recipe("gguf_context_length_strings.gguf")(
    _meta("ARCH.context_length", ARR, ["a", "", "b c"], STR))
recipe("gguf_block_count_array.gguf")(
    _meta("ARCH.block_count", ARR, [1], I32))
recipe("gguf_rope_dims_inf.gguf")(
    _meta("ARCH.rope.dimension_count", F32, float("inf")))
recipe("gguf_expert_used_count_neg_inf.gguf")(
    _meta("ARCH.expert_used_count", F32, float("-inf")))
recipe("gguf_eps_empty_array.gguf")(
    _meta("ARCH.attention.layer_norm_rms_epsilon", ARR, [], U8))
recipe("gguf_rope_base_array.gguf")(
    _meta("ARCH.rope.freq_base", ARR, [1.0], F32))
recipe("gguf_rope_scale_linear_strings.gguf")(
    _meta("ARCH.rope.scale_linear", ARR, ["a", ""], STR))
recipe("gguf_final_softcap_strings.gguf")(
    _meta("ARCH.final_logit_softcapping", ARR, ["a"], STR))
recipe("gguf_tokenizer_tokens_bool.gguf")(
    _meta("tokenizer.ggml.tokens", U8, 1))
recipe("gguf_tokenizer_tokens_numbers.gguf")(
    _meta("tokenizer.ggml.tokens", ARR, list(range(32)), U32))
recipe("gguf_tokenizer_scores_short.gguf")(
    _meta("tokenizer.ggml.scores", ARR, [0.0] * 5, F32))
recipe("gguf_tokenizer_types_short.gguf")(
    _meta("tokenizer.ggml.token_type", ARR, [1] * 5, I32))
recipe("gguf_tokenizer_types_scalar.gguf")(
    _meta("tokenizer.ggml.token_type", I32, 1))
recipe("gguf_tokenizer_special_id_array.gguf")(
    _meta("tokenizer.ggml.unknown_token_id", ARR, [0, 65536], U32))
recipe("gguf_tokenizer_merges_numbers.gguf")(
    _meta("tokenizer.ggml.merges", ARR, [1, 2, 3], U64, base=tiny_gpt2))
recipe("gguf_tokenizer_merges_scalar.gguf")(
    _meta("tokenizer.ggml.merges", U32, 7, base=tiny_gpt2))
recipe("gguf_tokenizer_merges_unknown_tokens.gguf")(lambda: _gpt2_short_vocab())  # tokenizers panicked
recipe("gguf_tokenizer_types_huge.gguf", "runs")(  # a lookup table of 2**40 entries: MemoryError
    _meta("tokenizer.ggml.token_type", ARR, [2**40] + [1] * 31, I64))
# values of another type that used to be converted rather than refused (int("32"), int(2.5), True as 1, ...)
recipe("gguf_embedding_length_string.gguf")(_meta("ARCH.embedding_length", STR, "32"))
recipe("gguf_head_count_float.gguf")(_meta("ARCH.attention.head_count", F32, 2.5))
recipe("gguf_block_count_bool.gguf")(_meta("ARCH.block_count", BOOL, True))
recipe("gguf_head_count_per_layer_strings.gguf")(_meta("ARCH.attention.head_count", ARR, ["2"], STR))
recipe("gguf_eps_string.gguf")(_meta("ARCH.attention.layer_norm_rms_epsilon", STR, "1e-5"))
recipe("gguf_tokenizer_scores_strings.gguf")(_meta("tokenizer.ggml.scores", ARR, ["-1.5"] * 32, STR))
recipe("gguf_tokenizer_add_bos_array.gguf")(_meta("tokenizer.ggml.add_bos_token", ARR, [1, 0], U8))
recipe("gguf_tokenizer_chat_template_number.gguf")(_meta("tokenizer.chat_template", U32, 5))


def _gpt2_short_vocab() -> bytes:
    """Merges naming tokens that are gone: "a b" makes "ab" (tokenizers' BPE panicked on that),
    "\u0120 a" needs "\u0120"."""
    g = tiny_gpt2()
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
        e = g.kv(key)
        e.value = e.value[:26]
    return g.to_bytes()


# ============================================================================ GGUF: data the engine reads

def kquant_nan_embedding(ttype: int) -> bytes:
    """K-quant matrices (rows of 256) whose inputs become NaN inside the engine (attn_v's block
    scales are NaN), so NaN activations are quantized to Q8_K: the AVX2 quantizer's unbounded
    search for the largest element read past the row and crashed."""
    g = GGUF()
    H, hd, V, F = 256, 8, 4, 8
    g.set("general.architecture", STR, "llama")
    for k, t, v in (("context_length", U32, 16), ("embedding_length", U32, H), ("block_count", U32, 1),
                    ("feed_forward_length", U32, F), ("attention.head_count", U32, 1),
                    ("attention.head_count_kv", U32, 1), ("attention.key_length", U32, hd),
                    ("attention.value_length", U32, hd), ("attention.layer_norm_rms_epsilon", F32, 1e-6)):
        g.set(f"llama.{k}", t, v)
    rng = np.random.default_rng(13)
    emb = rng.standard_normal((V, H)).astype("<f4")
    g.tensors.append(Tensor("token_embd.weight", [H, V], 0, emb.tobytes()))
    g.tensors.append(Tensor("output_norm.weight", [H], 0, np.ones(H, "<f4").tobytes()))
    for name, dims, tt in (("attn_norm", [H], 0), ("attn_q", [H, hd], ttype), ("attn_k", [H, hd], ttype),
                           ("attn_v", [H, hd], ttype), ("attn_output", [hd, H], 0), ("ffn_norm", [H], 0),
                           ("ffn_gate", [H, F], ttype), ("ffn_up", [H, F], ttype), ("ffn_down", [F, H], 0)):
        data = np.ones(H, "<f4").tobytes() if len(dims) == 1 else tensor_bytes(rng, tt, dims[0], dims[1])
        if name == "attn_v":  # NaN scales: V, the attention output and so the FFN's input are NaN
            d = bytearray(data)
            at = 0 if ttype == 12 else 208  # q4_k: d first; q6_k: d last in its 210-byte block
            for b in range(0, len(d), 144 if ttype == 12 else 210):
                d[b + at:b + at + 2] = b"\x00\x7e"
            data = bytes(d)
        g.tensors.append(Tensor(f"blk.0.{name}.weight", dims, tt, data))
    return g.to_bytes()


recipe("gguf_q4_k_nan_activations.gguf", "runs")(lambda: kquant_nan_embedding(12))
recipe("gguf_q6_k_nan_activations.gguf", "runs")(lambda: kquant_nan_embedding(14))


@recipe("gguf_q8_0_nan_scales.gguf", "runs")
def _():
    g = tiny()
    for t in g.tensors:
        if t.ttype == 8 and t.name.startswith("blk."):  # not the embedding: its rows are checked
            d = bytearray(t.data)
            for i in range(0, len(d), 34 * 3):
                d[i:i + 2] = b"\x00\x7e"  # f16 NaN scale
            t.data = bytes(d)
    return g.to_bytes()


@recipe("gguf_f16_inf_weights.gguf", "runs")
def _():
    g = tiny_gpt2()
    for t in g.tensors:
        if t.ttype == 1 and t.name.startswith("blk."):
            d = bytearray(t.data)
            d[0:2] = b"\x00\x7c"  # +inf
            d[2:4] = b"\x00\xfc"  # -inf
            t.data = bytes(d)
    return g.to_bytes()


# ============================================================================ safetensors

def st_base() -> Safetensors:
    return make_safetensors("F16", seed=21)


def _st(fn):
    def make():
        s = st_base()
        fn(s)
        return s.to_bytes()
    return make


E, Qn = "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"
recipe("st_empty.safetensors")(lambda: b"")
recipe("st_seven_bytes.safetensors")(lambda: b"\x10" + bytes(6))
recipe("st_header_length_huge.safetensors")(_st(lambda s: setattr(s, "header_len", 2**63)))
recipe("st_header_length_past_end.safetensors")(_st(lambda s: setattr(s, "header_len", 10**6)))
recipe("st_header_length_zero.safetensors")(_st(lambda s: setattr(s, "header_len", 0)))
recipe("st_header_not_json.safetensors")(_st(lambda s: setattr(s, "raw_header", b"{not json")))
recipe("st_header_json_list.safetensors")(_st(lambda s: setattr(s, "raw_header", b"[]")))
recipe("st_header_invalid_utf8.safetensors")(_st(lambda s: setattr(s, "raw_header", b'{"\xff": 1}')))
recipe("st_header_nested_deep.safetensors")(_st(lambda s: setattr(s, "raw_header", b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}")))
recipe("st_entry_not_object.safetensors")(_st(lambda s: s.header.__setitem__(E, [1, 2])))
recipe("st_entry_missing_dtype.safetensors")(_st(lambda s: s.header[E].pop("dtype")))
recipe("st_dtype_unknown.safetensors")(_st(lambda s: s.header[E].__setitem__("dtype", "F8_E4M3")))
recipe("st_shape_negative.safetensors")(_st(lambda s: s.header[E].__setitem__("shape", [-16, -32])))
recipe("st_shape_not_ints.safetensors")(_st(lambda s: s.header[E].__setitem__("shape", ["a", 32])))
recipe("st_offsets_reversed.safetensors")(_st(lambda s: s.header[E].__setitem__(
    "data_offsets", s.header[E]["data_offsets"][::-1])))
recipe("st_offsets_past_end.safetensors")(_st(lambda s: s.header[E].__setitem__("data_offsets", [0, 2**40])))
recipe("st_offsets_negative.safetensors")(_st(lambda s: s.header[E].__setitem__("data_offsets", [-4, s.header[E]["data_offsets"][1] - 4])))
recipe("st_offsets_mismatch_shape.safetensors")(_st(lambda s: s.header[E].__setitem__(
    "data_offsets", [s.header[E]["data_offsets"][0], s.header[E]["data_offsets"][1] - 4])))
recipe("st_offsets_one_value.safetensors")(_st(lambda s: s.header[E].__setitem__("data_offsets", [0])))
recipe("st_data_truncated.safetensors")(_st(lambda s: setattr(s, "data", s.data[:len(s.data) // 2])))
recipe("st_embed_missing.safetensors")(_st(lambda s: s.header.pop(E)))
recipe("st_tensor_missing.safetensors")(_st(lambda s: s.header.pop(Qn)))
recipe("st_unknown_parameter.safetensors")(_st(lambda s: s.header.__setitem__(
    "model.layers.0.mlp.experts.weight", dict(s.header["model.norm.weight"]))))
recipe("st_wrong_shape.safetensors")(_st(lambda s: s.header[Qn].__setitem__("shape", [8, 32])))
recipe("st_offsets_strings.safetensors")(
    _st(lambda s: s.header[E].__setitem__("data_offsets", ["0", s.header[E]["data_offsets"][1]])))
recipe("st_dtype_list.safetensors")(
    _st(lambda s: s.header[E].__setitem__("dtype", ["F32"])))
recipe("st_shape_product_overflow.safetensors")(
    _st(lambda s: s.header[E].__setitem__("shape", [2**64, 1])))
recipe("st_shape_floats.safetensors")(  # int() used to take 16.0 as 16
    _st(lambda s: s.header[E].__setitem__("shape", [float(d) for d in s.header[E]["shape"]])))
recipe("st_metadata_not_object.safetensors")(_st(lambda s: s.header.__setitem__("__metadata__", ["x"])))


# ============================================================================ Hugging Face folders

# one *.hf.json archive per folder (formats.HFFolder): config.json, generation_config.json and the
# tokenizer files as the fuzzer mutates them; every one of these raised another exception than
# ValueError (or was taken silently) before the loaders checked the fields they read (issue 16)

def hf_base() -> HFFolder:
    return hf_seeds()["llama_tok"]


def _hf(doc: str, **fields):
    def make():
        f = hf_base()
        f.docs[doc].update(fields)
        return f.to_bytes()
    return make


def _hf_nested(**text):
    def make():
        f = hf_base()
        cfg = {k: v for k, v in f.docs["config.json"].items() if k not in ("architectures", "model_type")}
        f.docs["config.json"] = {"model_type": "gemma3", "text_config": {**cfg, "model_type": "gemma3_text", **text}}
        return f.to_bytes()
    return make


_C, _G, _T = "config.json", "generation_config.json", "tokenizer_config.json"
for _name, _doc, _fields in [
    ("heads_zero", _C, dict(num_attention_heads=0)),                 # ZeroDivisionError in transformers
    ("hidden_zero", _C, dict(hidden_size=0)),                        # ZeroDivisionError: 0.0 ** -0.5
    ("heads_negative", _C, dict(num_attention_heads=-1)),            # TypeError: attn_scale complex
    ("head_dim_negative", _C, dict(head_dim=-1)),
    ("head_dim_odd", _C, dict(head_dim=7)),                          # the engine's rule, without the file
    ("hidden_float", _C, dict(hidden_size=16.5)),
    ("kv_heads_string", _C, dict(num_key_value_heads="1")),
    ("kv_heads_huge", _C, dict(num_key_value_heads=2**40)),          # ran for minutes
    ("kv_heads_not_dividing", _C, dict(num_key_value_heads=3)),
    ("vocab_negative", _C, dict(vocab_size=-1)),                     # silently accepted
    ("vocab_not_the_embedding", _C, dict(vocab_size=17)),            # silently accepted
    ("max_position_negative", _C, dict(max_position_embeddings=-1)),  # silently accepted
    ("layers_huge", _C, dict(num_hidden_layers=200000)),              # 22 s and 600 MB before failing
    ("layers_more_than_tensors", _C, dict(num_hidden_layers=2)),      # failed at the first forward
    ("torch_dtype_x", _C, dict(torch_dtype="x")),                     # AttributeError in transformers
    ("torch_dtype_list", _C, dict(torch_dtype=[])),                   # IndexError in transformers
    ("rope_theta_string", _C, dict(rope_theta="x")),
    ("rope_theta_zero", _C, dict(rope_theta=0)),
    ("rope_factor_string", _C, dict(rope_scaling={"rope_type": "linear", "factor": "x"})),
    ("rope_factor_missing", _C, dict(rope_scaling={"rope_type": "linear"})),  # KeyError in transformers
    ("experts_string", _C, dict(num_local_experts="8")),              # TypeError: '>' str and int
    ("eps_string", _C, dict(rms_norm_eps="x")),
    ("eos_nested_list", _G, dict(eos_token_id=[[1]])),                 # TypeError: unhashable list
    ("eos_string", _G, dict(eos_token_id="x")),                        # ValueError without the file
    ("eos_float", _G, dict(eos_token_id=1.5)),                         # silently token 1
    ("eos_bool", _G, dict(eos_token_id=True)),
    ("chat_template_list_of_strings", _T, dict(chat_template=["x"])),  # TypeError: string indices
    ("chat_template_entry_without_template", _T, dict(chat_template=[{"name": "default"}])),  # KeyError
    ("chat_template_number", _T, dict(chat_template=5)),               # silently a template of 5
    ("eos_token_number", _T, dict(eos_token=5)),                       # silently no EOS
    ("bos_token_content_list", _T, dict(bos_token={"content": ["<s>"]})),
]:
    recipe(f"hf_{_name}.hf.json")(_hf(_doc, **_fields))


def _hf_doc(name: str, doc=None, raw: str | None = None):
    def make():
        f = hf_base()
        if raw is None:
            f.docs[name] = doc
        else:
            del f.docs[name]
            f.raw[name] = raw
        return f.to_bytes()
    return make


recipe("hf_nested_text_config_of_another_type.hf.json")(_hf_nested(model_type="gemma4_text"))  # AttributeError
recipe("hf_nested_heads_zero.hf.json")(_hf_nested(num_attention_heads=0))
recipe("hf_tokenizer_config_a_list.hf.json")(_hf_doc(_T, [1, 2]))          # silently ignored
recipe("hf_generation_config_a_string.hf.json")(_hf_doc(_G, "3"))          # silently ignored
recipe("hf_generation_config_invalid_json.hf.json")(_hf_doc(_G, raw='{"eos_token_id": '))
recipe("hf_tokenizer_json_not_a_tokenizer.hf.json")(_hf_doc("tokenizer.json", {"model": None}))


@recipe("hf_config_eos_negative.hf.json")
def _():
    f = hf_base()
    del f.docs[_G]  # config.json's eos_token_id is read when generation_config.json has none
    f.docs[_C]["eos_token_id"] = -1
    return f.to_bytes()


@recipe("hf_chat_template_jinja_not_utf8.hf.json")
def _():
    f = hf_base()
    del f.docs[_T]["chat_template"]  # read from chat_template.jinja only when tokenizer_config has none
    f.raw["chat_template.jinja"] = "\udcff{{ x }}"
    return f.to_bytes()


recipe("hf_valid_named_chat_templates.hf.json", expect="runs")(lambda: hf_seeds()["llama_tok_bf16"].to_bytes())


# ============================================================================ writing

def write(out: str) -> list[str]:
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    names = []
    for name, (expect, fn) in sorted(RECIPES.items()):
        data = fn()
        assert isinstance(data, bytes), name
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        names.append(name)
    with open(os.path.join(out, "MANIFEST.json"), "w") as f:
        json.dump({n: {"expect": RECIPES[n][0], **({"known_bug": KNOWN_BUGS[n]} if n in KNOWN_BUGS else {})}
                   for n in names}, f, indent=1, sort_keys=True)
        f.write("\n")
    return names


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(HERE, "corpus"))
    args = p.parse_args()
    names = write(args.out)
    total = sum(os.path.getsize(os.path.join(args.out, n)) for n in names)
    print(f"{len(names)} files, {total / 1024:.0f} KiB in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
