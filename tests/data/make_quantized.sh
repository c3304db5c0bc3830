#!/bin/sh
# tests/data/tiny-llama-*.gguf: tiny random Llamas (tests/test_hf_parity.py's build("llama", ...),
# seed 0) written as F32 GGUF by rlxc.save, then quantized by the newest llama.cpp's own
# llama-quantize: Q4_1 and Q5_1 (hidden 64), Q5_K_M (hidden 256: Q5_K, Q6_K where the mix asks),
# IQ4_XS (hidden 256, intermediate 544: IQ4_XS, and IQ4_NL for ffn_down, whose rows of 544 are no
# multiple of 256), and Q4_K_S, Q3_K_M, Q2_K (hidden 256, two layers: each mix's per-tensor
# choices, Q2_K to Q6_K). Then llama.cpp's own logits of each file (llama_cpp.sh's `logits`).
# tests/test_gguf_types.py reads them.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/llama_cpp.sh"
f32 "$tmp/small.gguf" llama "hidden_size=64, intermediate_size=96"
f32 "$tmp/k.gguf" llama "hidden_size=256, intermediate_size=512, head_dim=64, num_hidden_layers=1"
f32 "$tmp/k2.gguf" llama "hidden_size=256, intermediate_size=512, head_dim=64, num_hidden_layers=2"
f32 "$tmp/iq4.gguf" llama "hidden_size=256, intermediate_size=544, head_dim=64, num_hidden_layers=1"
"$bin/llama-quantize" "$tmp/small.gguf" "$here/tiny-llama-q4_1.gguf" Q4_1
"$bin/llama-quantize" "$tmp/small.gguf" "$here/tiny-llama-q5_1.gguf" Q5_1
"$bin/llama-quantize" "$tmp/k.gguf" "$here/tiny-llama-q5_k_m.gguf" Q5_K_M
"$bin/llama-quantize" "$tmp/iq4.gguf" "$here/tiny-llama-iq4_xs.gguf" IQ4_XS
for t in Q4_K_S Q3_K_M Q2_K; do
    "$bin/llama-quantize" "$tmp/k2.gguf" "$here/tiny-llama-$(echo $t | tr A-Z a-z).gguf" $t
done
for f in "$here"/tiny-llama-*.gguf; do logits "$f"; done
rm -r "$tmp"
