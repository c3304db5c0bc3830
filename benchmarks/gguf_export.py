"""Write an rlxc Llama-style model as a GGUF file llama.cpp loads, with the very same
quantized bytes (so speed and numbers compare like for like)."""

from __future__ import annotations

import numpy as np


def _permute_rows(rows: np.ndarray, n_head: int) -> np.ndarray:
    # HF rotates halves of each head, llama.cpp's "llama" arch rotates adjacent pairs:
    # its converter reorders q/k rows the same way (rows are independent, so quantized
    # rows can be moved as they are).
    return rows.reshape(n_head, 2, rows.shape[0] // n_head // 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def write_llama_gguf(model, path: str, rope_theta: float) -> None:
    """A Llama-architecture GGUF of an rlxc.Model whose layers are plain Llama layers."""
    import gguf

    layers = model.layers
    l0 = layers[0]
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(len(layers))
    w.add_context_length(model.max_seq)
    w.add_embedding_length(model.hidden_size)
    w.add_feed_forward_length(l0.intermediate_size)
    w.add_head_count(l0.num_q_heads)
    w.add_head_count_kv(l0.num_kv_heads)
    w.add_rope_dimension_count(l0.rotary_dim)
    w.add_rope_freq_base(rope_theta)
    w.add_layer_norm_rms_eps(l0.eps)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    vocab = model.vocab_size
    w.add_tokenizer_model("llama")
    w.add_token_list([b"<unk>", b"<s>", b"</s>"] + [f"t{i}".encode() for i in range(3, vocab)])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
                      + [gguf.TokenType.NORMAL] * (vocab - 3))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)

    def tensor(name: str, layer, slot: str, n_head: int = 0) -> None:
        t = layer.weight_type(slot)
        if t == "f32":
            arr = layer.weight(slot)
            if n_head:
                arr = _permute_rows(arr, n_head)
            w.add_tensor(name, arr)
            return
        raw = layer.weight_raw(slot)
        if n_head:
            raw = np.ascontiguousarray(_permute_rows(raw, n_head))
        qt = {"q4_0": gguf.GGMLQuantizationType.Q4_0, "q8_0": gguf.GGMLQuantizationType.Q8_0}[t]
        w.add_tensor(name, raw, raw_dtype=qt)

    w.add_tensor("token_embd.weight", model.embed)
    for i, layer in enumerate(layers):
        tensor(f"blk.{i}.attn_norm.weight", layer, "attn_norm")
        tensor(f"blk.{i}.attn_q.weight", layer, "q_proj", layer.num_q_heads)
        tensor(f"blk.{i}.attn_k.weight", layer, "k_proj", layer.num_kv_heads)
        tensor(f"blk.{i}.attn_v.weight", layer, "v_proj")
        tensor(f"blk.{i}.attn_output.weight", layer, "o_proj")
        tensor(f"blk.{i}.ffn_norm.weight", layer, "ffn_norm")
        tensor(f"blk.{i}.ffn_gate.weight", layer, "gate_proj")
        tensor(f"blk.{i}.ffn_up.weight", layer, "up_proj")
        tensor(f"blk.{i}.ffn_down.weight", layer, "down_proj")
    w.add_tensor("output_norm.weight", model.norm_weight)
    qt = {"q4_0": gguf.GGMLQuantizationType.Q4_0, "q8_0": gguf.GGMLQuantizationType.Q8_0}.get(model.lm_head_type)
    if qt is None:
        w.add_tensor("output.weight", model._lm)
    else:
        w.add_tensor("output.weight", model._lm, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
