#!/bin/sh
# tests/data/tiny-*moe*.gguf and their llama.cpp logits: tiny random mixture-of-experts models
# (tests/test_hf_parity.py's build(arch, seed 0): Qwen3-MoE, Mixtral, Qwen2-MoE with its shared
# expert, Gemma 4 with experts beside its MLP; every layer MoE, as llama.cpp runs these
# architectures) written as F32 GGUF by rlxc.save, quantized by the newest llama.cpp's own
# llama-quantize (Q8_0; a one-layer Qwen3-MoE of hidden 256 in Q4_K_M, whose experts are K-quants),
# and llama.cpp's logits for TOKENS through its C API (llama_api_logits.c, f32 KV cache) saved
# as float32 [16][128] next to each file: .logits without flash attention, .fa.logits with it
# (the spread of llama.cpp's own numerics). tests/test_gguf_moe.py reads them.
set -e
here=$(cd "$(dirname "$0")" && pwd)
bin=${LLAMA_BIN:-$(ls -d "$here"/../../build/llama.cpp/build*/bin | head -1)}
src=${LLAMA_SRC:-$here/../../build/llama.cpp}
tmp=$(mktemp -d)
TOKENS="1 5 9 33 70 2 88 100 3 4 17 99 120 7 6 50"
cc "$here/llama_api_logits.c" -I"$src/include" -I"$src/ggml/include" -L"$bin" -lllama -Wl,-rpath,"$bin" \
    -o "$tmp/llama_api_logits"
f32() {  # f32 OUT ARCH BUILD_ARGS
    PYTHONPATH="$here/.." python -c "
import rlxc, sys
from test_hf_parity import build
rlxc.save(rlxc.from_hf(build('$2', $3)), sys.argv[1])" "$1"
}
one() {  # one NAME ARCH BUILD_ARGS TYPE
    f32 "$tmp/$1.gguf" "$2" "$3"
    "$bin/llama-quantize" "$tmp/$1.gguf" "$here/$1-$(echo $4 | tr A-Z a-z).gguf" "$4" > /dev/null 2>&1
    out="$here/$1-$(echo $4 | tr A-Z a-z)"
    "$tmp/llama_api_logits" "$out.gguf" "$out.logits" $TOKENS 2> /dev/null
    FA=1 "$tmp/llama_api_logits" "$out.gguf" "$out.fa.logits" $TOKENS 2> /dev/null
}
one tiny-qwen3moe qwen3_moe "mlp_only_layers=[], use_sliding_window=False" Q8_0
one tiny-mixtral mixtral "sliding_window=None" Q8_0
one tiny-qwen2moe qwen2_moe "use_sliding_window=False, layer_types=None" Q8_0
one tiny-gemma4moe gemma4_moe "" Q8_0
one tiny-qwen3moe-256 qwen3_moe "mlp_only_layers=[], use_sliding_window=False, hidden_size=256, head_dim=64, \
moe_intermediate_size=256, num_experts=4, num_hidden_layers=1" Q4_K_M
rm -r "$tmp"
