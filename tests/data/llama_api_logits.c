/* llama.cpp's logits for a token sequence through its C API: every position's logits of one
 * batch with an f32 KV cache, as float32 [n_tokens][n_vocab] to OUT. Used by make_moe.sh to record what the newest
 * llama.cpp computes for the checked-in GGUF files (tests/test_gguf_moe.py compares rlxc to it).
 *   cc llama_api_logits.c -I$LLAMA/include -I$LLAMA/ggml/include -L$BIN -lllama -o llama_api_logits
 *   [FA=1] ./llama_api_logits MODEL.gguf OUT.f32 ID ID ID ... */
#include <stdio.h>
#include <stdlib.h>
#include "llama.h"

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL.gguf OUT.f32 TOKEN...\n", argv[0]);
        return 2;
    }
    const int n = argc - 3;
    llama_token *ids = malloc(n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = atoi(argv[3 + i]);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n < 64 ? 64 : n;
    cp.n_batch = cp.n_ubatch = n;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    /* FA=1 in the environment: its flash-attention path, whose rounding differs */
    cp.flash_attn_type = getenv("FA") && atoi(getenv("FA")) ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED; /* not its default f16 cache: the comparison is of the weights' path */
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return 1;
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = ids[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n;
    if (llama_decode(ctx, b)) return 1;
    const int V = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE *f = fopen(argv[2], "wb");
    for (int i = 0; i < n; i++) fwrite(llama_get_logits_ith(ctx, i), sizeof(float), V, f);
    fclose(f);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    free(ids);
    return 0;
}
