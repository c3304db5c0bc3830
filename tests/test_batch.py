"""Batched sequences (issue 17): several independent sequences, each with its own KV caches,
decoded side by side in one pass (``Model.decode_batch``), against each sequence run alone.

Tolerances: f32 activations 1e-5 relative to the largest logit (the batch goes through the GEMM
path, a sequence alone through the matvec: measured 0 to 3e-7), q8 activations 1e-3 (the bound
the q8 tests use between the two paths; measured 0 here)."""

from __future__ import annotations

import numpy as np
import pytest

rlxc = pytest.importorskip("rlxc")
pytest.importorskip("torch")
pytest.importorskip("transformers")

from rlxc.hf import from_hf  # noqa: E402
from test_hf_parity import build, rel_err, token_ids  # noqa: E402

TOL = {"f32": 1e-5, "q8": 1e-3}
LENGTHS = (5, 23, 12, 1)  # past the window of 8 in gemma3's sliding layers, and a one-token prompt


def alone(m, prompt, tokens):
    """The sequence run by itself: logits after the prompt, then after each token."""
    m.reset()
    m.sequence = 0
    out = [m.prefill(prompt, logits="last")]
    out += [m.decode(int(t)) for t in tokens]
    return out


@pytest.mark.parametrize("arch,weights,act", [
    ("gemma3", "f32", "f32"), ("gemma3", "q8_0", "q8"), ("llama", "q4_0", "f32"), ("gemma4_kv", "f32", "f32"),
    ("gemma4_ple", "q8_0", "q8"), ("qwen2_moe", "q8_0", "f32"), ("mixtral", "q4_0", "f32"),
])
def test_each_sequence_of_a_batch_equals_it_alone(arch, weights, act, isa):
    over = dict(sliding_window=8) if arch == "gemma3" else {}
    m = from_hf(build(arch, **over), weights=weights, max_seq=64, activations=act)
    m.ubatch = 16                                  # rings of windowed layers in gemma3
    prompts = [token_ids(n, seed=50 + n) for n in LENGTHS]
    first = m.prefill_batch(prompts)
    assert m.sequences == len(prompts) and m.sequence == 0
    rng = np.random.default_rng(51)
    steps = rng.integers(0, m.vocab_size, size=(6, len(prompts)))  # the same tokens fed alone below
    batch = [m.decode_batch(s) for s in steps]
    assert batch[0].shape == (len(prompts), m.vocab_size)
    assert [m.pipeline.seq_past(b) for b in range(len(prompts))] == [n + 6 for n in LENGTHS]
    for b, p in enumerate(prompts):
        ref = alone(m, p, steps[:, b])
        assert rel_err(first[b], ref[0]) <= TOL[act]
        for i in range(6):
            assert rel_err(batch[i][b], ref[i + 1]) <= TOL[act], (b, i)


def test_a_batch_of_some_sequences_in_any_order_and_threads(isa):
    m = from_hf(build("gemma3", sliding_window=8), max_seq=64, activations="f32")
    m.sequences = 5
    prompts = [token_ids(n, seed=60 + n) for n in (3, 9, 14, 6, 2)]
    m.prefill_batch(prompts)
    tokens, seqs = [7, 11, 13], [4, 0, 2]          # a subset, out of order
    got = {}
    for threads in (1, 2, 3, 7):
        m.threads = threads
        for b in range(5):                         # back to the state after the prompts
            m.sequence = b
            m.pipeline.set_n_past(len(prompts[b]))
        m.sequence = 0
        got[threads] = m.decode_batch(tokens, seqs)
    for threads in (2, 3, 7):
        np.testing.assert_array_equal(got[threads], got[1])
    assert [m.pipeline.seq_past(b) for b in range(5)] == [4, 9, 15, 6, 3]
    for row, (t, s) in zip(got[1], zip(tokens, seqs)):
        ref = alone(m, prompts[s], [t])[-1]
        assert rel_err(row, ref) <= TOL["f32"]


def test_switching_sequences_keeps_each_cache():
    m = from_hf(build("llama"), max_seq=64, activations="f32")
    m.sequences = 2
    a, b = token_ids(10, seed=70), token_ids(7, seed=71)
    m.sequence = 0
    m.prefill(a[:6], logits="none")
    m.sequence = 1
    m.prefill(b, logits="none")
    m.sequence = 0
    assert m.n_past == 6
    got = m.prefill(a[6:], logits="last")
    ref = alone(m, a, [])[0]
    assert rel_err(got, ref) <= 1e-6
    # kv_cache views belong to the active sequence; switching while they live is refused
    m.sequences = 2
    m.sequence = 1
    m.prefill(b, logits="none")
    k, v = m.kv_cache(0)
    assert k.shape[1] == len(b)
    with pytest.raises(BufferError, match="kv_cache"):
        m.sequence = 0
    del k, v
    m.sequence = 0
    assert m.n_past == 0 and m.kv_cache(0)[0].shape[1] == 0


def test_memory_scales_with_sequences():
    m = from_hf(build("llama"), max_seq=64)
    one = m.pipeline.kv_bytes
    m.sequences = 3
    assert m.pipeline.kv_bytes == 3 * one and m.kv_memory()["at_max_seq"] == 3 * one
    with pytest.raises(ValueError, match="sequences must be an int in"):
        m.sequences = 0


def test_bad_batches_are_errors_that_keep_every_sequence():
    m = from_hf(build("llama"), max_seq=8)
    m.prefill_batch([[1, 2], [3]])
    before = [m.pipeline.seq_past(b) for b in range(2)]
    for tokens, seqs, match in [
        ([], None, "tokens are empty"),
        ([1, 2], [0, 0], "sequence 0 appears twice"),
        ([1], [5], "between 1 and|does not exist"),
        ([1, 2, 3], None, "needs as many sequences"),
        ([1, 999], None, "out of range"),
    ]:
        with pytest.raises(ValueError, match=match):
            m.decode_batch(tokens, seqs)
        assert [m.pipeline.seq_past(b) for b in range(2)] == before
    with m.hooks({"layers.0.resid_post": lambda x: None}):
        with pytest.raises(ValueError, match="do not run in a batch"):
            m.decode_batch([1, 2])
    for _ in range(6):
        m.decode_batch([1, 2])                     # sequence 0 reaches max_seq = 8
    with pytest.raises(ValueError, match="sequence 0 is full"):
        m.decode_batch([1, 2])
    with pytest.raises(ValueError, match="at least one prompt"):
        m.prefill_batch([])
