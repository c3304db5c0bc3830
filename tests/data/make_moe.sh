#!/bin/sh
# tests/data/tiny-*moe*.gguf and their llama.cpp logits: tiny random mixture-of-experts models
# (tests/test_hf_parity.py's build(arch, seed 0): Qwen3-MoE, Mixtral, Qwen2-MoE with its shared
# expert, Gemma 4 with experts beside its MLP; every layer MoE, as llama.cpp runs these
# architectures) written as F32 GGUF by rlxc.save, quantized by the newest llama.cpp's own
# llama-quantize (Q8_0; a one-layer Qwen3-MoE of hidden 256 in Q4_K_M, whose experts are K-quants),
# and llama.cpp's logits (llama_cpp.sh's `logits`) saved as float32 [16][128] next to each file.
# tests/test_gguf_moe.py reads them.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/llama_cpp.sh"
one() {  # one NAME ARCH BUILD_ARGS TYPE
    f32 "$tmp/$1.gguf" "$2" "$3"
    out="$here/$1-$(echo $4 | tr A-Z a-z).gguf"
    "$bin/llama-quantize" "$tmp/$1.gguf" "$out" "$4" > /dev/null 2>&1
    logits "$out"
}
one tiny-qwen3moe qwen3_moe "mlp_only_layers=[], use_sliding_window=False" Q8_0
one tiny-mixtral mixtral "sliding_window=None" Q8_0
one tiny-qwen2moe qwen2_moe "use_sliding_window=False, layer_types=None" Q8_0
one tiny-gemma4moe gemma4_moe "" Q8_0
one tiny-qwen3moe-256 qwen3_moe "mlp_only_layers=[], use_sliding_window=False, hidden_size=256, head_dim=64, \
moe_intermediate_size=256, num_experts=4, num_hidden_layers=1" Q4_K_M
rm -r "$tmp"
