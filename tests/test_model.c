/* The whole-model engine (rlxc_model) from plain C, without Python: a small random model with
 * every kind of layer part (sliding and full attention, partial RoPE, q/k norms, shared K/V,
 * sandwich norms, biases, Gemma 4 per-layer inputs, experts beside the dense FFN, quantized and
 * float weights, an untied
 * quantized lm_head, final softcap) built through rlxc.h alone, then for each ISA:
 *   - prefill and decode give identical bits on 1, 2, 3 and 7 threads (both activation modes;
 *     layers 4 and 5, without experts, are where a decode's threads each hold the residual row);
 *   - a prefill's logits match token-by-token decodes (1e-4 relative to the largest logit);
 *   - a rewind (decode at pos < n_past) reproduces the first run's logits exactly;
 *   - bad calls (ids outside the vocabulary, positions past the cache, too many tokens) fail
 *     with a message and leave the cache as it was;
 *   - KV caches: windowed layers in rings (passes of 4 tokens) give the logits of full caches bit
 *     for bit, rewinds included; f16 K/V within 2e-3 of the largest logit; a rewind past a ring
 *     fails and keeps the cache;
 *   - taps (rlxc_pipeline_set_taps): one call per tapped stage with its T, positions and width,
 *     the same values on 1 and 3 threads, nothing changed by a tap that only reads (attn_probs,
 *     computed apart, within 1e-5), a tap adding a vector equal to the steer_resid_post slot bit
 *     for bit, a failing tap naming its stage and leaving the cache as it was;
 *   - the team's chunked loops (team.h) hand out every item of a sequence of loops exactly once,
 *     in chunks cut at multiples of their alignment, with and without barriers between loops.
 * Prints PASS/FAIL per check and "all model checks passed" at the end (exit status 1 otherwise).
 * `test_model N` tries thread counts up to N only (qemu-user hangs in libgomp's thread start, so
 * the aarch64 run under qemu uses 1). Built and run by tests/build_kernel_test.sh (and
 * tests/build_kernel_test_neon.sh under qemu), under ASan/UBSan by .ci/sanitize.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "rlxc.h"
#include "team.h"

#define H 96
#define V 50
#define NL 6
#define P 32
#define T_PROMPT 9
#define T_DECODE 4
#define MAX_SEQ 24

static int failures, max_threads = 1 << 20;

static void check(int ok, const char *isa, const char *what) {
    printf("%s %-7s %s\n", ok ? "PASS" : "FAIL", isa, what);
    if (!ok) failures++;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float uniform(void) { /* [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
}

static float *random_floats(size_t n, float scale, float offset) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = offset + scale * uniform();
    return x;
}

/* A matrix of `type` made from random floats, as a borrowed weight (the test frees data). */
static rlxc_weight make_matrix(int rows, int cols, rlxc_wtype type, float scale) {
    float *f = random_floats((size_t)rows * cols, scale, 0.0f);
    const size_t rb = rlxc_wtype_row_bytes(type, cols);
    char *data = malloc((size_t)rows * rb);
    for (int r = 0; r < rows; r++) rlxc_quantize_row(type, data + r * rb, f + (size_t)r * cols, cols);
    free(f);
    return (rlxc_weight){.type = type, .rows = rows, .cols = cols, .data = data, .borrowed = 1};
}

static void configure(rlxc_layer *l, int i) {
    rlxc_layer_init(l);
    l->hidden_size = H;
    l->intermediate_size = 160;
    l->num_q_heads = 4;
    l->num_kv_heads = 2;
    l->head_dim = 24;
    l->attn_scale = 0.2f;
    l->rotary_dim = i % 2 ? 24 : 16; /* partial RoPE on even layers */
    l->rope_base = i % 2 ? 1e6f : 1e4f;
    l->sliding_window = i % 2 ? 0 : 5;
    l->has_qk_norm = i >= 1;
    l->qkv_bias = i == 0;
    l->sandwich_norm = i >= 2;
    l->kv_shared_from = i == 3 ? 1 : -1;
    l->activation = i % 2 ? RLXC_GELU_TANH : RLXC_SILU;
    l->ffn_type = i == 2 ? RLXC_STANDARD : RLXC_GATED;
    l->ffn_up_bias = l->ffn_down_bias = i == 2;
    l->norm_offset = i == 1 ? 1.0f : 0.0f;
    l->attn_softcap = i == 2 ? 30.0f : 0.0f;
    l->layer_scalar = i == 3 ? 0.5f : 1.0f;
    l->ple_dim = P;
    if (i == 1 || i == 3) { /* experts beside the dense FFN: 2 of 6 (layer 1), all 5 (layer 3) */
        l->num_experts = i == 1 ? 6 : 5;
        l->num_experts_used = i == 1 ? 2 : 5;
        l->expert_intermediate_size = i == 1 ? 64 : 32;
        l->moe_norm_topk = i == 1;
    }
}

/* Every slot the layer uses: matrices in q4_0 / q8_0 / f32 by layer, vectors near 1 (norms) or 0. */
static int fill(rlxc_layer *l, int i, char *err) {
    static const rlxc_wtype types[NL] = {RLXC_Q4_0, RLXC_Q8_0, RLXC_F32, RLXC_Q4_0, RLXC_Q8_0, RLXC_Q4_0};
    for (int s = 0; s < RLXC_W_COUNT; s++) {
        if (!rlxc_wslot_used(l, (rlxc_wslot)s)) continue;
        int rows, cols;
        rlxc_wslot_shape(l, (rlxc_wslot)s, &rows, &cols);
        const int matrix = rlxc_wslot_is_matrix((rlxc_wslot)s), norm = strstr(rlxc_wslot_name((rlxc_wslot)s), "norm") != NULL;
        float *x = random_floats((size_t)rows * cols, matrix ? 0.3f : 0.1f, norm && !matrix ? 1.0f : 0.0f);
        const rlxc_wtype t = matrix && cols % 32 == 0 ? types[i] : RLXC_F32;
        const int rc = rlxc_layer_set_weight(l, (rlxc_wslot)s, x, rows, cols, t, err);
        free(x);
        if (rc) return -1;
    }
    return 0;
}

static float max_abs(const float *x, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

static float max_diff(const float *a, const float *b, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fabsf(a[i] - b[i]) > m ? fabsf(a[i] - b[i]) : m;
    return m;
}

/* Prefill the prompt then decode T_DECODE tokens: every logit, [T_PROMPT + T_DECODE][V]. */
static int run(rlxc_model *m, const int32_t *ids, float *logits, char *err) {
    if (rlxc_pipeline_reset(rlxc_model_pipeline(m), err) ||
        rlxc_model_prefill(m, ids, T_PROMPT, RLXC_LOGITS_ALL, logits, NULL, err))
        return -1;
    for (int t = 0; t < T_DECODE; t++)
        if (rlxc_model_decode(m, ids[T_PROMPT + t], T_PROMPT + t, logits + (size_t)(T_PROMPT + t) * V, err)) return -1;
    return 0;
}

static void test_isa(const char *isa, rlxc_model *m, const int32_t *ids) {
    char err[RLXC_ERRLEN];
    rlxc_pipeline *p = rlxc_model_pipeline(m);
    const size_t n = (size_t)(T_PROMPT + T_DECODE) * V;
    float *ref = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    static const int threads[] = {1, 2, 3, 7};
    for (int act = RLXC_ACT_Q8; act <= RLXC_ACT_F32; act++) {
        rlxc_pipeline_set_act(p, (rlxc_act)act);
        int same = 1;
        for (size_t k = 0; k < sizeof threads / sizeof *threads && threads[k] <= max_threads; k++) {
            rlxc_pipeline_set_threads(p, threads[k]);
            if (run(m, ids, k ? got : ref, err)) {
                printf("  error: %s\n", err);
                same = 0;
                break;
            }
            if (k && memcmp(ref, got, n * sizeof(float))) {
                printf("  %d threads differ from 1 thread by up to %g\n", threads[k], max_diff(ref, got, n));
                same = 0;
            }
        }
        char what[96];
        snprintf(what, sizeof what, "%s (%s activations)",
                 max_threads < 2 ? "runs on 1 thread (no other count tried)" : "identical logits on 1, 2, 3, 7 threads",
                 act == RLXC_ACT_Q8 ? "q8" : "f32");
        check(same, isa, what);
        /* prefill of the whole sequence against the decodes above (ref: prompt prefill + decodes) */
        rlxc_pipeline_set_threads(p, max_threads < 3 ? max_threads : 3);
        rlxc_pipeline_reset(p, err);
        float *pre = malloc(n * sizeof(float));
        const int ok = !rlxc_model_prefill(m, ids, T_PROMPT + T_DECODE, RLXC_LOGITS_ALL, pre, NULL, err);
        const float tol = 1e-4f * max_abs(ref, n), d = ok ? max_diff(pre + (size_t)T_PROMPT * V, ref + (size_t)T_PROMPT * V, (size_t)T_DECODE * V) : INFINITY;
        if (!ok) printf("  error: %s\n", err);
        else if (d > tol) printf("  prefill vs decode: %g > %g\n", d, tol);
        check(d <= tol, isa, "prefill logits match token-by-token decode (1e-4 of the largest logit)");
        free(pre);
    }
    /* rewind: decode again at a position inside the cache */
    rlxc_pipeline_set_act(p, RLXC_ACT_Q8);
    rlxc_pipeline_set_threads(p, max_threads < 2 ? max_threads : 2);
    int ok = !run(m, ids, ref, err);
    float again[V];
    ok = ok && !rlxc_model_decode(m, ids[T_PROMPT + 1], T_PROMPT + 1, again, err);
    check(ok && !memcmp(again, ref + (size_t)(T_PROMPT + 1) * V, sizeof again), isa,
          "a rewind reproduces the logits of that position");
    /* bad calls fail with a message and keep the cache */
    const int n_past = rlxc_pipeline_n_past(p);
    int32_t bad[2] = {3, V};
    err[0] = 0;
    ok = rlxc_model_prefill(m, bad, 2, RLXC_LOGITS_LAST, again, NULL, err) && strstr(err, "vocabulary");
    ok = ok && rlxc_model_decode(m, -1, n_past, again, err) && strstr(err, "vocabulary");
    ok = ok && rlxc_model_decode(m, 1, n_past + 1, again, err) && strstr(err, "past");
    ok = ok && rlxc_model_prefill(m, ids, MAX_SEQ, RLXC_LOGITS_NONE, NULL, NULL, err) && strstr(err, "max_seq");
    check(ok && rlxc_pipeline_n_past(p) == n_past, isa, "bad ids and positions fail cleanly");
    free(ref);
    free(got);
}

/* Rings against full caches (same passes of 4 tokens), f16 against f32, rewinds. */
static void test_kv(const char *isa, rlxc_model *m, const int32_t *ids) {
    char err[RLXC_ERRLEN];
    rlxc_pipeline *p = rlxc_model_pipeline(m);
    const size_t n = (size_t)(T_PROMPT + T_DECODE) * V;
    float *full = malloc(n * sizeof(float)), *ring = malloc(n * sizeof(float)), *half = malloc(n * sizeof(float));
    float a[V], b[V];
    rlxc_pipeline_set_act(p, RLXC_ACT_Q8);
    rlxc_pipeline_set_threads(p, max_threads < 3 ? max_threads : 3);
    /* window 5, passes of 4: rings of 8 cells + 4 mirrors < MAX_SEQ */
    int ok = !rlxc_pipeline_set_kv(p, RLXC_F32, 0, 4, err) && !run(m, ids, full, err);
    ok = ok && !rlxc_model_decode(m, ids[3], T_PROMPT + T_DECODE - 4, a, err);
    ok = ok && !rlxc_pipeline_set_kv(p, RLXC_F32, 1, 4, err) && !run(m, ids, ring, err);
    ok = ok && rlxc_pipeline_kv_bytes(p) < (size_t)NL * 2 * 2 * MAX_SEQ * 24 * sizeof(float);
    ok = ok && !rlxc_model_decode(m, ids[3], T_PROMPT + T_DECODE - 4, b, err);
    ok = ok && !memcmp(full, ring, n * sizeof(float)) && !memcmp(a, b, sizeof a);
    if (!ok) printf("  rings: %s\n", err);
    check(ok, isa, "rings give the full caches' logits bit for bit (prefill in passes, decode, rewind)");
    ok = !run(m, ids, ring, err) && rlxc_model_decode(m, ids[0], 2, a, err) && strstr(err, "rewind at most 4 tokens");
    ok = ok && rlxc_pipeline_n_past(p) == T_PROMPT + T_DECODE;
    check(ok, isa, "a rewind past a ring fails and keeps the cache");
    rlxc_pipeline_set_act(p, RLXC_ACT_F32); /* 8-bit activations would magnify the f16 rounding */
    ok = !rlxc_pipeline_set_kv(p, RLXC_F32, 1, 4, err) && !run(m, ids, full, err);
    ok = ok && !rlxc_pipeline_set_kv(p, RLXC_F16, 1, 4, err) && !run(m, ids, half, err);
    const float d = max_diff(full, half, n), tol = 2e-3f * max_abs(full, n); /* measured 2.9e-4 */
    if (!ok || d > tol) printf("  f16: %s, %g > %g\n", err, d, tol);
    check(ok && d <= tol, isa, "f16 K/V within 2e-3 of the largest logit (f32 activations)");
    rlxc_pipeline_set_kv(p, RLXC_F32, 1, 512, err);
    rlxc_pipeline_reset(p, err);
    free(full), free(ring), free(half);
}

typedef struct {
    int calls, fail_at;        /* fail_at: the call that returns 1 (0: none) */
    double sum;                /* of every value seen */
    const float *add;          /* added to layers.<add_layer>.resid_post when set */
    int add_layer;
    int bad_width;
} tap_log;

static int expected_width(const rlxc_layer *l, rlxc_stage s, int keys) {
    switch (s) {
    case RLXC_STAGE_Q: case RLXC_STAGE_ATTN_Z: return l->num_q_heads * l->head_dim;
    case RLXC_STAGE_K: case RLXC_STAGE_V: return l->num_kv_heads * l->head_dim;
    case RLXC_STAGE_ATTN_PROBS: return l->num_q_heads * keys;
    case RLXC_STAGE_MLP_ACT: return l->intermediate_size;
    case RLXC_STAGE_LOGITS: return V;
    default: return H;
    }
}

static rlxc_layer *tap_layers[NL];

static int log_tap(void *ctx, int layer, rlxc_stage s, float *data, int T, int pos0, int width) {
    tap_log *lg = ctx;
    const rlxc_layer *l = tap_layers[layer < 0 ? 0 : layer];
    if (width != expected_width(l, s, pos0 + T)) lg->bad_width++;
    for (int i = 0; i < T * width; i++) lg->sum += data[i];
    if (lg->add && layer == lg->add_layer && s == RLXC_STAGE_RESID_POST)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < H; i++) data[t * H + i] += lg->add[i];
    return ++lg->calls == lg->fail_at;
}

/* Prefill of the prompt and one decode with the taps on (masks NULL: off); logits [T_PROMPT + 1][V]. */
static int run_tapped(rlxc_model *m, const int32_t *ids, const uint32_t *masks, tap_log *lg, float *logits, char *err) {
    rlxc_pipeline *p = rlxc_model_pipeline(m);
    if (rlxc_pipeline_set_taps(p, masks ? log_tap : NULL, lg, masks, err)) return -1;
    int rc = rlxc_pipeline_reset(p, err) || rlxc_model_prefill(m, ids, T_PROMPT, RLXC_LOGITS_ALL, logits, NULL, err) ||
             rlxc_model_decode(m, ids[T_PROMPT], T_PROMPT, logits + (size_t)T_PROMPT * V, err);
    rlxc_pipeline_set_taps(p, NULL, NULL, NULL, err);
    return rc ? -1 : 0;
}

static void test_taps(const char *isa, rlxc_model *m, const int32_t *ids) {
    char err[RLXC_ERRLEN];
    rlxc_pipeline *p = rlxc_model_pipeline(m);
    rlxc_pipeline_set_act(p, RLXC_ACT_Q8);
    const size_t n = (size_t)(T_PROMPT + 1) * V;
    float *ref = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float)), *probs = malloc(n * sizeof(float));
    uint32_t masks[NL + 1], no_probs[NL + 1];
    int stages_per_call = 0;
    for (int i = 0; i < NL; i++) {
        masks[i] = 0;
        for (int s = 0; s < RLXC_STAGE_COUNT; s++)
            if (!rlxc_stage_is_model((rlxc_stage)s) && !((s == RLXC_STAGE_K || s == RLXC_STAGE_V) && tap_layers[i]->kv_shared_from >= 0))
                masks[i] |= 1u << s;
        no_probs[i] = masks[i] & ~(1u << RLXC_STAGE_ATTN_PROBS);
        stages_per_call += __builtin_popcount(masks[i]);
    }
    masks[NL] = no_probs[NL] = (1u << RLXC_STAGE_EMBED) | (1u << RLXC_STAGE_FINAL_NORM) | (1u << RLXC_STAGE_LOGITS);
    stages_per_call += 3;
    rlxc_pipeline_set_threads(p, 1);
    int ok = !run_tapped(m, ids, NULL, NULL, ref, err);
    tap_log a = {0}, b = {0}, c = {0};
    ok = ok && !run_tapped(m, ids, no_probs, &a, got, err) && !memcmp(ref, got, n * sizeof(float));
    rlxc_pipeline_set_threads(p, max_threads < 3 ? max_threads : 3);
    ok = ok && !run_tapped(m, ids, masks, &b, probs, err) && max_diff(ref, probs, n) <= 1e-5f * max_abs(ref, n);
    ok = ok && a.calls == 2 * (stages_per_call - NL) && b.calls == 2 * stages_per_call && !a.bad_width && !b.bad_width;
    ok = ok && !run_tapped(m, ids, no_probs, &c, got, err) && c.sum == a.sum; /* 3 threads see what 1 saw */
    /* taps off the residual row only: a decode on several threads keeps each thread's own row in
     * the layers without experts */
    const uint32_t resid = (1u << RLXC_STAGE_RESID_PRE) | (1u << RLXC_STAGE_ATTN_IN) | (1u << RLXC_STAGE_RESID_MID) |
                           (1u << RLXC_STAGE_MLP_IN) | (1u << RLXC_STAGE_RESID_POST);
    uint32_t inner[NL + 1] = {0};
    int inner_per_call = 0;
    for (int i = 0; i < NL; i++) inner_per_call += __builtin_popcount(inner[i] = no_probs[i] & ~resid);
    tap_log e = {0};
    ok = ok && !run_tapped(m, ids, inner, &e, got, err) && !memcmp(ref, got, n * sizeof(float)) &&
         e.calls == 2 * inner_per_call;
    if (!ok) printf("  taps: %s (calls %d / %d / %d of %d / %d per call)\n", err, a.calls, b.calls, e.calls,
                    stages_per_call, inner_per_call);
    check(ok, isa, "taps see every stage once per call, the same on 1 and 3 threads, and change nothing");
    /* a tap adding v to layers.L.resid_post == the steer_resid_post slot, on 3 threads: L = 1 has
     * experts, L = 4 none and neither has the next (their decode holds a residual row in each
     * thread, but not in a layer whose taps edit it) */
    float *v = random_floats(H, 0.5f, 0.0f);
    ok = 1;
    for (int L = 1; L <= 4; L += 3) {
        uint32_t one[NL + 1] = {0};
        one[L] = 1u << RLXC_STAGE_RESID_POST;
        tap_log d = {.add = v, .add_layer = L};
        ok = ok && !run_tapped(m, ids, one, &d, got, err);
        ok = ok && !rlxc_layer_set_weight(tap_layers[L], RLXC_W_STEER_POST, v, 1, H, RLXC_F32, err) &&
             !run_tapped(m, ids, NULL, NULL, probs, err) && !memcmp(got, probs, n * sizeof(float)) &&
             memcmp(got, ref, n * sizeof(float));
        rlxc_layer_clear_weight(tap_layers[L], RLXC_W_STEER_POST);
    }
    check(ok, isa, "a tap adding a vector equals the steering slot bit for bit (a layer with experts and one without)");
    /* a failing tap: the call fails naming the stage, the cache keeps its tokens */
    ok = !run_tapped(m, ids, NULL, NULL, got, err);
    tap_log f = {.fail_at = 4}; /* embed, resid_pre, attn_in, q */
    ok = ok && !rlxc_pipeline_set_taps(p, log_tap, &f, no_probs, err);
    ok = ok && rlxc_model_decode(m, ids[0], T_PROMPT + 1, got, err) && strstr(err, "tap at stage layers.0.q");
    ok = ok && rlxc_pipeline_n_past(p) == T_PROMPT + 1;
    rlxc_pipeline_set_taps(p, NULL, NULL, NULL, err);
    ok = ok && rlxc_pipeline_set_taps(p, log_tap, &f, (uint32_t[NL + 1]){[3] = 1u << RLXC_STAGE_K}, err) != 0 &&
         strstr(err, "layer 3 reads layer 1's K/V");
    check(ok, isa, "a failing tap fails the call naming its stage; k/v taps of a sharing layer are refused");
    free(v), free(ref), free(got), free(probs);
}

/* Rows read back from a packed copy (what a tied embedding's lookups use) equal the GGUF rows'
 * dequantization bit for bit, the tail rows past the last whole group included. */
static void test_weight_rows(const char *isa) {
    static const rlxc_wtype types[] = {RLXC_Q4_0, RLXC_Q8_0, RLXC_Q4_K};
    int ok = 1;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        enum { K_MAX = 2 * RLXC_QK_K };
        const int K = types[i] == RLXC_Q4_K ? K_MAX : H; /* Q4_K: 2 super-blocks */
        rlxc_weight w = make_matrix(V, K, types[i], 1.0f);
        rlxc_weight_pack(&w, 0);
        ok &= w.packed != NULL || !rlxc_kernels_active()->wt[types[i]].matvec_x16;
        float a[K_MAX], b[K_MAX];
        for (int r = 0; r < V; r++) {
            rlxc_weight_row(&w, r, a);
            rlxc_dequantize_row(w.type, b, (const char *)w.data + r * rlxc_wtype_row_bytes(w.type, K), K);
            ok &= !memcmp(a, b, (size_t)K * sizeof(float));
        }
        rlxc_weight_unpack(&w);
        free(w.data);
    }
    check(ok, isa, "rows of a packed copy equal the GGUF rows");
}

/* Three sequences with prompts of 2, 5 and 8 tokens decoded side by side in one pass per token:
 * each row equals the sequence run alone (f32 activations, 1e-5 of the largest logit: the batch
 * takes the GEMM path), the same bits on 1 and 3 threads; bad batches fail and keep every
 * sequence. */
static void test_batch(const char *isa, rlxc_model *m, const int32_t *ids) {
    enum { B = 3, STEPS = 4 };
    static const int lens[B] = {2, 5, 8}; /* + STEPS <= T_PROMPT + T_DECODE ids */
    char err[RLXC_ERRLEN];
    rlxc_pipeline *p = rlxc_model_pipeline(m);
    rlxc_pipeline_set_act(p, RLXC_ACT_F32);
    float *batch[2], *alone = malloc((size_t)(STEPS + 1) * V * sizeof(float)), last[V];
    const int32_t seqs[B] = {2, 0, 1};
    int ok = !rlxc_pipeline_set_seqs(p, B, err);
    for (int th = 0; th < 2; th++) {
        batch[th] = malloc((size_t)STEPS * B * V * sizeof(float));
        rlxc_pipeline_set_threads(p, th && max_threads >= 3 ? 3 : 1);
        ok = ok && !rlxc_pipeline_reset(p, err);
        for (int s = 0; ok && s < B; s++)
            ok = !rlxc_pipeline_use_seq(p, s, err) && !rlxc_model_prefill(m, ids, lens[s], RLXC_LOGITS_NONE, NULL, NULL, err);
        for (int t = 0; ok && t < STEPS; t++) {
            int32_t toks[B] = {ids[lens[2] + t], ids[lens[0] + t], ids[lens[1] + t]};
            ok = !rlxc_model_decode_batch(m, seqs, toks, B, batch[th] + (size_t)t * B * V, err);
        }
    }
    ok = ok && !memcmp(batch[0], batch[1], (size_t)STEPS * B * V * sizeof(float));
    for (int b = 0; ok && b < B; b++) { /* sequence seqs[b], alone (as sequence 0) */
        const int s = seqs[b];
        ok = !rlxc_pipeline_reset(p, err) && !rlxc_pipeline_use_seq(p, 0, err) &&
             !rlxc_model_prefill(m, ids, lens[s], RLXC_LOGITS_NONE, NULL, NULL, err);
        for (int t = 0; ok && t < STEPS; t++) ok = !rlxc_model_decode(m, ids[lens[s] + t], lens[s] + t, alone + (size_t)t * V, err);
        for (int t = 0; ok && t < STEPS; t++) {
            const float *row = batch[0] + ((size_t)t * B + b) * V;
            if (max_diff(row, alone + (size_t)t * V, V) > 1e-5f * max_abs(alone + (size_t)t * V, V)) ok = 0;
        }
    }
    if (!ok) printf("  batch: %s\n", err);
    check(ok, isa, "each sequence of a batch equals it alone, the same on 1 and 3 threads");
    /* bad batches: a repeated or missing sequence, a bad id; every sequence keeps its length */
    ok = !rlxc_pipeline_set_seqs(p, 2, err) && !rlxc_model_prefill(m, ids, 3, RLXC_LOGITS_NONE, NULL, NULL, err);
    int32_t twice[2] = {0, 0}, toks[2] = {1, 2}, badtok[2] = {1, V};
    ok = ok && rlxc_model_decode_batch(m, twice, toks, 2, last, err) && strstr(err, "twice");
    ok = ok && rlxc_model_decode_batch(m, (int32_t[]){0, 5}, toks, 2, last, err) && strstr(err, "does not exist");
    ok = ok && rlxc_model_decode_batch(m, (int32_t[]){0, 1}, badtok, 2, last, err) && strstr(err, "vocabulary");
    ok = ok && rlxc_pipeline_seq_past(p, 0) == 3 && rlxc_pipeline_seq_past(p, 1) == 0;
    check(ok, isa, "bad batches fail and keep every sequence");
    rlxc_pipeline_set_seqs(p, 1, err);
    free(batch[0]), free(batch[1]), free(alone);
}

/* Loops of these sizes one after the other (a barrier after the third), each item counted. */
static const size_t loop_sizes[] = {100, 0, 5, 1000, 17, 48, 3000};
#define LOOP_ITEMS (100 + 0 + 5 + 1000 + 17 + 48 + 3000)
typedef struct {
    _Atomic int hits[LOOP_ITEMS];
    _Atomic int misaligned;
    int chunks_per_thread;
} loops_arg;

static void loops_team(const rlxc_team *tm, void *arg) {
    loops_arg *a = arg;
    size_t off = 0;
    for (size_t l = 0; l < sizeof loop_sizes / sizeof *loop_sizes; off += loop_sizes[l], l++) {
        rlxc_team_loop lp = rlxc_team_loop_begin(tm, loop_sizes[l], 16, a->chunks_per_thread);
        size_t x, y;
        while (rlxc_team_next(tm, &lp, &x, &y)) {
            if (x % 16 || (y % 16 && y != loop_sizes[l])) a->misaligned++;
            for (size_t i = x; i < y; i++) a->hits[off + i]++;
        }
        if (l == 2) rlxc_team_sync(tm);
    }
}

static void test_team_loops(void) {
    static const int threads[] = {1, 2, 3, 7};
    int ok = 1;
    for (size_t i = 0; i < sizeof threads / sizeof *threads && threads[i] <= max_threads; i++)
        for (int per = RLXC_CHUNKS_GUIDED; per <= 8; per = per ? 2 * per : 1) {
            static loops_arg a;
            memset(&a, 0, sizeof a);
            a.chunks_per_thread = per;
            rlxc_team_run(threads[i], loops_team, &a);
            for (int j = 0; j < LOOP_ITEMS; j++) ok &= a.hits[j] == 1;
            ok &= !a.misaligned;
        }
    check(ok, "team", "chunked loops give every item once, chunks aligned (1-7 threads, guided and 1-8 chunks each)");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress shows line by line (slow under qemu) */
    if (argc > 1) max_threads = atoi(argv[1]) > 0 ? atoi(argv[1]) : 1;
    char err[RLXC_ERRLEN];
    if (rlxc_kernels_init(err, sizeof err)) {
        printf("kernel init: %s\n", err);
        return 1;
    }
    test_team_loops();
    rlxc_layer layers[NL], *ptrs[NL];
    for (int i = 0; i < NL; i++) {
        configure(&layers[i], i);
        ptrs[i] = tap_layers[i] = &layers[i];
        if (fill(&layers[i], i, err)) {
            printf("layer %d: %s\n", i, err);
            return 1;
        }
    }
    rlxc_pipeline *p = rlxc_pipeline_create(ptrs, NL, MAX_SEQ, 1, err);
    if (!p) {
        printf("pipeline: %s\n", err);
        return 1;
    }
    float *norm = random_floats(H, 0.1f, 1.0f), *ple_norm = random_floats(P, 0.1f, 1.0f);
    rlxc_model_parts parts = {
        .embed = make_matrix(V, H, RLXC_Q8_0, 1.0f), .embed_scale = sqrtf(H),
        .lm_head = make_matrix(V, H, RLXC_Q4_0, 0.3f),
        .norm_type = RLXC_RMSNORM, .norm = {.type = RLXC_F32, .rows = 1, .cols = H, .data = norm, .borrowed = 1},
        .norm_eps = 1e-6f, .final_softcap = 15.0f,
        .ple_embed = make_matrix(V, NL * P, RLXC_Q8_0, 1.0f), .ple_proj = make_matrix(NL * P, H, RLXC_F32, 0.3f),
        .ple_norm = {.type = RLXC_F32, .rows = 1, .cols = P, .data = ple_norm, .borrowed = 1},
        .ple_embed_scale = sqrtf(P), .ple_proj_scale = 1.0f / sqrtf(H), .ple_input_scale = 1.0f / sqrtf(2.0f),
        .ple_eps = 1e-6f,
    };
    rlxc_model *m = rlxc_model_create(p, &parts, err);
    if (!m) {
        printf("model: %s\n", err);
        return 1;
    }
    int32_t ids[T_PROMPT + T_DECODE];
    for (int t = 0; t < T_PROMPT + T_DECODE; t++) ids[t] = (int32_t)((t * 17 + 5) % V);
    static const char *isas[] = {"scalar", "avx2", "avx512", "neon"};
    for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
        if (!rlxc_kernels_available(isas[i]) || rlxc_kernels_select(isas[i], err, sizeof err)) continue;
        test_isa(isas[i], m, ids);
        test_taps(isas[i], m, ids);
        test_kv(isas[i], m, ids);
        test_batch(isas[i], m, ids);
        test_weight_rows(isas[i]);
    }
    rlxc_model_free(m);
    rlxc_pipeline_free(p);
    for (int i = 0; i < NL; i++) rlxc_layer_free(&layers[i]);
    free(parts.embed.data), free(parts.lm_head.data), free(parts.ple_embed.data), free(parts.ple_proj.data);
    free(norm), free(ple_norm);
    if (failures) {
        printf("%d model checks FAILED\n", failures);
        return 1;
    }
    printf("all model checks passed\n");
    return 0;
}
