# Sourced by make_quantized.sh and make_moe.sh (after setting `here` to this folder): the newest
# llama.cpp's binaries and source tree (LLAMA_BIN, LLAMA_SRC; default: the build under
# build/llama.cpp that benchmarks/vs_llama_bench.py makes), a temporary folder $tmp, the token ids
# TOKENS that llama.cpp is run on (tests/test_gguf_types.py's TOKENS), llama_api_logits.c built
# against its libllama, and
#   f32 OUT ARCH BUILD_ARGS   a tiny random model (tests/test_hf_parity.py's build(ARCH, BUILD_ARGS))
#                             written as F32 GGUF by rlxc.save
#   logits FILE.gguf          llama.cpp's logits of FILE for TOKENS (f32 KV cache): FILE.logits without
#                             flash attention, FILE.fa.logits with it (the spread of its own numerics)
set -e
bin=${LLAMA_BIN:-$(ls -d "$here"/../../build/llama.cpp/build*/bin | head -1)}
src=${LLAMA_SRC:-$here/../../build/llama.cpp}
tmp=$(mktemp -d)
TOKENS="1 5 9 33 70 2 88 100 3 4 17 99 120 7 6 50"
cc "$here/llama_api_logits.c" -I"$src/include" -I"$src/ggml/include" -L"$bin" -lllama -Wl,-rpath,"$bin" \
    -o "$tmp/llama_api_logits"
f32() {
    PYTHONPATH="$here/.." python -c "
import rlxc, sys
from test_hf_parity import build
rlxc.save(rlxc.from_hf(build('$2', $3)), sys.argv[1])" "$1"
}
logits() {
    "$tmp/llama_api_logits" "$1" "${1%.gguf}.logits" $TOKENS 2> /dev/null
    FA=1 "$tmp/llama_api_logits" "$1" "${1%.gguf}.fa.logits" $TOKENS 2> /dev/null
}
