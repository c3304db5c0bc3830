"""rlxc.profile: the engine's time per stage and thread.

Each stage a model has is timed (and the ones it lacks are not), a thread's stages add up to no
more than the calls' wall time, the calls are counted, and timing changes no result.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import rlxc  # noqa: E402
from rlxc import _rlxc  # noqa: E402
from test_hf_parity import build, token_ids  # noqa: E402

DENSE = {"embed", "norm", "quantize", "qkv", "heads", "attention", "o_proj", "ffn_up", "ffn_down", "lm_head"}


def timed(prof: rlxc.Profile) -> set[str]:
    return {name for name, s in prof.seconds.items() if s.any()}


@pytest.mark.parametrize("threads", [1, 3])
def test_a_prefill_times_the_stages_of_its_model(threads):
    model = rlxc.from_hf(build("llama"), weights="q4_0", max_seq=64, threads=threads)
    ids = token_ids(20)
    t0 = time.perf_counter()
    with rlxc.profile() as prof:
        model.prefill(ids, logits="last")
    outside = time.perf_counter() - t0
    assert prof.calls == 1 and prof.threads == threads
    names = timed(prof)
    assert DENSE <= names, DENSE - names
    assert not names & {"experts", "ple", "taps"}
    assert ("wait" in names) == (threads > 1)
    per_thread = np.sum(list(prof.seconds.values()), axis=0)
    assert per_thread.shape == (threads,)
    assert np.all(per_thread <= prof.wall + 1e-6) and prof.wall <= outside
    assert "ffn_up" in repr(prof) and "<table>" in prof._repr_html_()


def test_decode_calls_are_counted_and_results_unchanged():
    model = rlxc.from_hf(build("llama"), weights="q8_0", max_seq=64, threads=2)
    ids = token_ids(12)
    model.reset()
    ref = [model.prefill(ids[:4])] + [model.decode(int(t))[None] for t in ids[4:]]
    model.reset()
    with rlxc.profile() as prof:
        got = [model.prefill(ids[:4])] + [model.decode(int(t))[None] for t in ids[4:]]
    np.testing.assert_array_equal(np.concatenate(got), np.concatenate(ref))
    assert prof.calls == 1 + len(ids) - 4


@pytest.mark.parametrize("arch,stage", [("qwen3_moe", "experts"), ("gemma4_ple", "ple")])
def test_experts_and_per_layer_inputs_have_their_stage(arch, stage):
    model = rlxc.from_hf(build(arch), weights="q8_0", max_seq=64, threads=2)
    with rlxc.profile() as prof:
        model.prefill(token_ids(9), logits="last")
    assert stage in timed(prof)


def test_hooks_are_timed_apart():
    model = rlxc.from_hf(build("llama"), max_seq=64, threads=2)

    def slow(values, positions):
        time.sleep(0.01)

    with model.hooks({"layers.0.mlp_out": slow}), rlxc.profile() as prof:
        model.prefill(token_ids(6), logits="last")
    assert prof.seconds["taps"].max() >= 0.01


def test_an_op_outside_a_model_is_other():
    w = np.random.default_rng(0).standard_normal((64, 96), dtype=np.float32)
    with rlxc.profile() as prof:
        rlxc.ops.matmul(np.ones((5, 96), np.float32), rlxc.ops.quantize_q8_0(w), "q8_0", threads=2)
    assert {"other", "quantize"} <= timed(prof) and prof.calls == 1


def test_start_and_stop_out_of_turn_raise():
    with rlxc.profile():
        with pytest.raises(RuntimeError, match="already running"):
            _rlxc.profile_start()
    with pytest.raises(RuntimeError, match="no profile is running"):
        _rlxc.profile_stop()
    with rlxc.profile() as prof:
        pass
    assert prof.calls == 0 and prof.wall == 0.0 and prof.rows() == []
