"""Regression tests of the loaders' hardening (issue 16, findings 3, 5 and 6).

A case that kills the interpreter (SIGBUS from a truncated mapping) runs in a child process, so
that the signal is observed instead of taking pytest down.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import rlxc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "fuzz"))

import formats  # noqa: E402  (tiny GGUF files built without transformers)


def run_child(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=HERE)


def tiny_gguf(path) -> str:
    """A two-layer llama of q8_0 matrices with an untied q8_0 lm_head and an SPM vocabulary."""
    path = str(path)
    with open(path, "wb") as f:
        f.write(formats.seeds()["llama_q8_0_untied"].to_bytes())
    return path


# ---------------------------------------------------------------- finding 3: the file changes after load

CHANGE_AFTER_LOAD = """
import os, numpy as np, rlxc
path, how, weights, mmap = {path!r}, {how!r}, {weights!r}, {mmap!r}
m = rlxc.load(path, weights=weights, mmap=mmap, max_seq=16, threads=1)
before = m.forward([1, 2, 3])
if how == "truncate":
    os.truncate(path, 0)  # every page past the end (a tiny file fits in the first one)
else:  # overwrite every weight byte in place (same size, same inode)
    with open(path, "r+b") as f:
        f.seek(4096)
        f.write(b"\\x55" * (os.path.getsize(path) - 4096))
after = m.forward([1, 2, 3])
print("SAME" if np.array_equal(before, after) else "CHANGED")
"""


@pytest.mark.parametrize("weights", [None, "q8_0"])
@pytest.mark.parametrize("how", ["truncate", "overwrite"])
def test_mmap_false_model_survives_the_file_changing(tmp_path, how, weights):
    path = tiny_gguf(tmp_path / "m.gguf")
    r = run_child(CHANGE_AFTER_LOAD.format(path=path, how=how, weights=weights, mmap=False))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[-1] == "SAME"


@pytest.mark.parametrize("weights", [None, "q8_0"])
def test_mmap_true_truncated_file_is_sigbus_as_documented(tmp_path, weights):
    """Pins the behaviour load()'s docstring and the README document for the default mmap=True:
    the weights (with weights='q8_0' still the embedding table) are read from the file's pages,
    and the pages past a truncation raise SIGBUS."""
    path = tiny_gguf(tmp_path / "m.gguf")
    r = run_child(CHANGE_AFTER_LOAD.format(path=path, how="truncate", weights=weights, mmap=True))
    assert r.returncode == -signal.SIGBUS, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])


def test_mmap_true_overwritten_file_changes_the_logits_as_documented(tmp_path):
    path = tiny_gguf(tmp_path / "m.gguf")
    r = run_child(CHANGE_AFTER_LOAD.format(path=path, how="overwrite", weights=None, mmap=True))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[-1] == "CHANGED"


def _open_by_this_process(path: str) -> tuple[int, int]:
    """(mappings of ``path``, file descriptors open on it) in this process."""
    with open("/proc/self/maps") as f:
        maps = sum(path in line for line in f)
    fds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds += os.readlink(f"/proc/self/fd/{fd}") == path
        except OSError:  # the descriptor listdir itself used
            pass
    return maps, fds


def test_mmap_false_is_the_same_model_and_keeps_no_file_open(tmp_path):
    path = tiny_gguf(tmp_path / "m.gguf")
    owned = rlxc.load(path, max_seq=16, mmap=False)
    assert _open_by_this_process(path) == (0, 0)
    mapped = rlxc.load(path, max_seq=16)
    assert _open_by_this_process(path)[0] == 1
    np.testing.assert_array_equal(mapped.forward([1, 2, 3]), owned.forward([1, 2, 3]))
    assert owned.tokenizer.encode("ab") == mapped.tokenizer.encode("ab")
    # the owned copy is read-only like the mapping, and page-aligned like it (the views keep the file's alignment)
    info = owned._gguf.info("blk.0.attn_q.weight")
    raw = owned._gguf.raw("blk.0.attn_q.weight")
    assert not raw.flags.writeable and raw.ctypes.data % 4096 == info.offset % 4096


def test_mmap_false_hf_folder(tmp_path):
    pytest.importorskip("transformers")
    import targets
    folder = str(tmp_path / "ckpt")
    targets.prepare_folder(folder)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(formats.st_seeds()["llama_bf16"].to_bytes())
    a = rlxc.load(folder, weights="f32", max_seq=16, mmap=False)
    assert _open_by_this_process(os.path.join(folder, "model.safetensors")) == (0, 0)
    b = rlxc.load(folder, weights="f32", max_seq=16)
    np.testing.assert_array_equal(a.forward([1, 2, 3]), b.forward([1, 2, 3]))


# ---------------------------------------------------------------- finding 5: rlxc.save's temporary file

@pytest.fixture()
def small_model(tmp_path):
    return rlxc.load(tiny_gguf(tmp_path / "src.gguf"), max_seq=16)


def test_save_does_not_follow_a_symlink_at_the_old_temp_name(tmp_path, small_model):
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    os.symlink(victim, out / "m.gguf.tmp")  # the name rlxc.save used to write through
    rlxc.save(small_model, out / "m.gguf")
    assert victim.read_bytes() == b"precious"
    assert sorted(os.listdir(out)) == ["m.gguf", "m.gguf.tmp"]
    np.testing.assert_array_equal(rlxc.load(out / "m.gguf", max_seq=16).forward([1, 2]), small_model.forward([1, 2]))


def test_failed_save_leaves_no_temp_file_and_the_target_as_it_was(tmp_path, small_model, monkeypatch):
    somedir = tmp_path / "somedir"
    somedir.mkdir()
    with pytest.raises(IsADirectoryError):
        rlxc.save(small_model, somedir)
    assert sorted(os.listdir(tmp_path)) == ["somedir", "src.gguf"] and not os.listdir(somedir)
    target = tmp_path / "m.gguf"
    target.write_bytes(b"old")

    def fail(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="No space"):
        rlxc.save(small_model, target)
    assert target.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["m.gguf", "somedir", "src.gguf"]
    monkeypatch.undo()
    with pytest.raises(FileNotFoundError):
        rlxc.save(small_model, tmp_path / "no" / "such" / "dir.gguf")


def test_save_permissions_and_atomic_replace(tmp_path, small_model):
    old = os.umask(0o027)
    try:
        rlxc.save(small_model, tmp_path / "new.gguf")
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "new.gguf").st_mode & 0o777 == 0o640  # 0o666 less the umask, like open()
    existing = tmp_path / "existing.gguf"
    rlxc.save(small_model, existing)
    os.chmod(existing, 0o604)
    running = rlxc.load(existing, max_seq=16)
    want = running.forward([1, 2, 3])
    rlxc.save(small_model, existing)  # replaced by a rename: the mapped model keeps the old file
    assert os.stat(existing).st_mode & 0o777 == 0o604
    np.testing.assert_array_equal(running.forward([1, 2, 3]), want)
    link = tmp_path / "link.gguf"
    os.symlink(existing, link)
    rlxc.save(small_model, link)  # the link itself is replaced, the file it named is not written
    assert not os.path.islink(link) and os.path.getsize(existing) == os.path.getsize(link)


# ---------------------------------------------------------------- finding 6: malformed Hugging Face folders

def hf_folder(tmp_path, config=None, drop=(), files=None) -> str:
    """The fuzzer's tiny llama checkpoint (config.json over formats.HF_CONFIG) plus extra files."""
    pytest.importorskip("transformers")
    import json
    folder = tmp_path / "ckpt"
    folder.mkdir(exist_ok=True)
    st = formats.st_seeds()["llama_f32"]
    for name in drop:
        del st.header[name]
    (folder / "model.safetensors").write_bytes(st.to_bytes())
    (folder / "config.json").write_text(json.dumps({**formats.HF_CONFIG, **(config or {})}))
    for name, content in (files or {}).items():
        (folder / name).write_text(content if isinstance(content, str) else json.dumps(content))
    return str(folder)


@pytest.mark.parametrize("field,value", [
    ("num_attention_heads", 0), ("hidden_size", 0), ("intermediate_size", 0),   # ZeroDivisionError / engine
    ("num_attention_heads", -1), ("head_dim", -1),                               # TypeError: complex numbers
    ("num_attention_heads", 16.5), ("hidden_size", "16"), ("num_key_value_heads", True),
    ("num_key_value_heads", 2 ** 40), ("vocab_size", -1), ("vocab_size", 17), ("max_position_embeddings", -1),
    ("torch_dtype", "x"), ("torch_dtype", []), ("dtype", "x"),                   # AttributeError / IndexError
    ("rms_norm_eps", "x"), ("rope_theta", "x"), ("rope_theta", 0), ("num_key_value_heads", 3),
    ("rope_scaling", {"rope_type": "linear", "factor": "x"}), ("rope_scaling", {"rope_type": "linear"}),
    ("num_hidden_layers", 0), ("num_hidden_layers", 2), ("num_hidden_layers", 200000),
])
def test_malformed_config_raises_value_error_naming_file_and_field(tmp_path, field, value):
    folder = hf_folder(tmp_path, {field: value})
    with pytest.raises(ValueError, match=r"config\.json: .*" + {"rope_scaling": "rope_parameters",
                                                                  "rope_theta": "rope_parameters"}.get(field, field)):
        rlxc.load(folder, weights="f32", max_seq=16, tokenizer=False)


def test_layer_count_checked_against_the_tensors_before_building_layers(tmp_path):
    import time
    folder = hf_folder(tmp_path, {"num_hidden_layers": 100_000})  # took 22 s and 600 MB before failing (2e5)
    t = time.monotonic()
    with pytest.raises(ValueError, match=r"config\.json: field 'num_hidden_layers' is 100000, but the checkpoint "
                                         r"has tensors of 1 layers"):
        rlxc.load(folder, weights="f32", max_seq=16, tokenizer=False)
    assert time.monotonic() - t < 5


@pytest.mark.parametrize("tensor", ["model.layers.0.self_attn.k_proj.weight", "model.layers.0.input_layernorm.weight"])
def test_incomplete_checkpoint_fails_at_load_not_at_the_first_forward(tmp_path, tensor):
    folder = hf_folder(tmp_path, drop=[tensor])
    slot = "k_proj" if "k_proj" in tensor else "attn_norm"
    with pytest.raises(ValueError, match=f"layer 0 lacks tensors for {slot}"):
        rlxc.load(folder, weights="f32", max_seq=16, tokenizer=False)


def tiny_tokenizer_json() -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", "a", "b", "c"] + [f"t{i}" for i in range(10)])}
    t = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    return t.to_str()


@pytest.mark.parametrize("file,content,field", [
    ("generation_config.json", {"eos_token_id": [[1]]}, "eos_token_id"),   # TypeError: unhashable
    ("generation_config.json", {"eos_token_id": "x"}, "eos_token_id"),     # ValueError from int("x")
    ("generation_config.json", {"eos_token_id": 1.5}, "eos_token_id"),     # silently token 1
    ("generation_config.json", {"eos_token_id": True}, "eos_token_id"),
    ("generation_config.json", {"eos_token_id": -1}, "eos_token_id"),
    ("tokenizer_config.json", {"chat_template": ["x"]}, "chat_template"),  # TypeError: string indices
    ("tokenizer_config.json", {"chat_template": [{"name": "default"}]}, "chat_template"),  # KeyError
    ("tokenizer_config.json", {"chat_template": 5}, "chat_template"),      # silently a template of 5
    ("tokenizer_config.json", {"eos_token": 5}, "eos_token"),              # silently no EOS
    ("tokenizer_config.json", {"bos_token": {"content": ["<s>"]}}, "bos_token.content"),
    ("tokenizer_config.json", [1, 2], None),                               # silently ignored
    ("generation_config.json", "3", None),
])
def test_malformed_tokenizer_files_raise_value_error_naming_file_and_field(tmp_path, file, content, field):
    pytest.importorskip("tokenizers")
    import json
    folder = hf_folder(tmp_path, files={"tokenizer.json": tiny_tokenizer_json(), file: json.dumps(content)})
    with pytest.raises(ValueError, match=re.escape(file) + (f": field '{re.escape(field)}'" if field
                                                            else ": not a JSON object")):
        rlxc.load(folder, weights="f32", max_seq=16)


def test_well_formed_tokenizer_files_still_load(tmp_path):
    pytest.importorskip("tokenizers")
    folder = hf_folder(tmp_path, files={
        "tokenizer.json": tiny_tokenizer_json(), "generation_config.json": {"eos_token_id": [2, 5]},
        "tokenizer_config.json": {"bos_token": {"content": "<s>"}, "eos_token": "</s>",
                                  "chat_template": [{"name": "default", "template": "{{ messages[0]['content'] }}"},
                                                    {"name": "tool_use", "template": "x"}]}})
    tok = rlxc.load(folder, weights="f32", max_seq=16).tokenizer
    assert tok.bos_id == 1 and tok.eos_id == 2 and tok.eog_ids == {2, 5}
    assert tok.apply_chat_template([{"role": "user", "content": "a b"}]) == "a b"
    (tmp_path / "ckpt" / "tokenizer_config.json").write_text("{}")
    (tmp_path / "ckpt" / "chat_template.jinja").write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="chat_template.jinja: not UTF-8"):
        rlxc.load(folder, weights="f32", max_seq=16)
