#!/bin/sh
# tests/data/tiny-llama-q4_1.gguf and tiny-llama-q5_1.gguf: a tiny random Llama (tests/
# test_hf_parity.py's build("llama", hidden_size=64, intermediate_size=96), seed 0) written as F32
# GGUF by rlxc.save, then quantized by the newest llama.cpp's own llama-quantize (Q4_1 / Q5_1
# matrices, its Q8_0 output). tests/test_gguf_types.py reads them.
set -e
here=$(cd "$(dirname "$0")" && pwd)
bin=${LLAMA_BIN:-$(ls -d "$here"/../../build/llama.cpp/build*/bin | head -1)}
tmp=$(mktemp -d)
PYTHONPATH="$here/.." python -c "
import rlxc, sys
from test_hf_parity import build
rlxc.save(rlxc.from_hf(build('llama', hidden_size=64, intermediate_size=96)), sys.argv[1])" "$tmp/f32.gguf"
for t in Q4_1 Q5_1; do
    "$bin/llama-quantize" "$tmp/f32.gguf" "$here/tiny-llama-$(echo $t | tr A-Z a-z).gguf" $t
done
rm -r "$tmp"
