"""rlxc quickstart: layers as Python objects, a pipeline, a model, generation, a checkpoint.

    python examples/quickstart.py                 # random weights, nothing to download
    python examples/quickstart.py MODEL.gguf      # also a real checkpoint (GGUF file or HF folder)

Every step uses the public API only; the file passes ``mypy --strict`` (tests/test_typing.py).
"""

from __future__ import annotations

import sys

import numpy as np
import numpy.typing as npt

import rlxc

F32 = npt.NDArray[np.float32]


def random_layer(rng: np.random.Generator, *, head_dim: int, kv_heads: int, window: int,
                 dtype: str = "q8_0") -> rlxc.Layer:
    """One decoder layer with random weights; matrices stored as ``dtype``, vectors as f32."""
    layer = rlxc.Layer(hidden_size=128, intermediate_size=256, head_dim=head_dim, num_q_heads=4,
                       num_kv_heads=kv_heads, sliding_window=window, activation=rlxc.Activation.GELU_TANH)
    for name in layer.used_weights():
        shape = layer.weight_shape(name)
        w: F32 = rng.standard_normal(shape).astype(np.float32)
        if len(shape) == 2:
            layer.set_weight(name, w * np.float32(shape[1] ** -0.5), dtype)
        else:
            layer.set_weight(name, np.float32(1.0) + np.float32(0.1) * w, "f32")
    return layer


def layers_and_pipeline() -> list[rlxc.Layer]:
    rng = np.random.default_rng(0)
    # adjacent layers may differ in every field: head_dim, kv heads, window, RoPE ...
    layers = [random_layer(rng, head_dim=32, kv_heads=2, window=16),
              random_layer(rng, head_dim=64, kv_heads=1, window=0)]
    layers[1].rope_base = 1e6
    layers[1].rotary_dim = 32                      # partial RoPE; validated on write
    for i, layer in enumerate(layers):
        print(f"layer {i}: {layer.attention_kind}, head_dim {layer.head_dim}, "
              f"{layer.nbytes / 1e3:.1f} kB of weights ({', '.join(sorted(layer.used_weights())[:3])}, ...)")

    pipe = rlxc.Pipeline(layers, max_seq=64, threads=1)
    x: F32 = rng.standard_normal((8, 128)).astype(np.float32)
    h = pipe.prefill(x)                            # [8, 128], the cache now holds 8 tokens
    y = pipe.decode_token(h[-1], pipe.n_past)      # one more token
    print(f"pipeline: prefill {h.shape} -> decode {y.shape}, n_past {pipe.n_past}")
    return layers


def model_and_generation(layers: list[rlxc.Layer]) -> None:
    rng = np.random.default_rng(1)
    vocab = 256
    embed: F32 = (rng.standard_normal((vocab, 128)) * 0.1).astype(np.float32)
    model = rlxc.Model(layers, embed, norm_weight=np.ones(128, np.float32), max_seq=64, threads=1,
                       name="quickstart")
    print(model)
    ids = [1, 2, 3, 4, 5]
    logits = model.forward(ids)                    # [5, vocab]
    print(f"logits {logits.shape}, next token {int(np.argmax(logits[-1]))}")
    greedy = model.generate(ids, 8)                # token ids (this model has no tokenizer)
    sampled = model.generate(ids, 8, temperature=0.8, top_k=40, seed=0)
    print(f"greedy: {greedy}, sampled: {sampled}")
    before = model.forward(ids)
    model.layers[0].sliding_window = 2             # every field is editable between calls
    after = model.forward(ids)
    print(f"sliding_window 16 -> 2 on layer 0 moves the logits by {float(np.max(np.abs(after - before))):.3g}")


def checkpoint(path: str) -> None:
    model = rlxc.load(path)                        # GGUF: weights used in place from the file
    print(model)
    for row in model.layer_table()[:3]:
        print("  ", row)
    if model.tokenizer is not None:
        for piece in model.generate("The capital of France is", 16, stream=True):
            print(piece, end="", flush=True)
        print()


def main(argv: list[str]) -> int:
    info = rlxc.cpu_info()
    print(f"rlxc {rlxc.__version__} on {rlxc.get_isa()} kernels ({info['default_threads']} threads by default)")
    w: F32 = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    back = rlxc.ops.dequantize(rlxc.ops.quantize_q4_0(w), "q4_0", w.shape[1])
    print(f"q4_0 round trip: max error {float(np.max(np.abs(back - w))):.3f}")
    layers = layers_and_pipeline()
    model_and_generation(layers)
    if len(argv) > 1:
        checkpoint(argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
