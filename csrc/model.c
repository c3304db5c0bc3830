/* A whole causal LM: token ids -> embedding (and Gemma 4 per-layer inputs) -> the pipeline's
 * layers -> final norm -> lm_head -> softcap, every stage inside one thread team per call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine.h"
#include "kernels.h"

#define FAIL(...) do { snprintf(err, RLXC_ERRLEN, __VA_ARGS__); return -1; } while (0)

struct rlxc_model {
    rlxc_pipeline *p; /* borrowed */
    rlxc_model_parts parts;
};

rlxc_model *rlxc_model_create(rlxc_pipeline *p, const rlxc_model_parts *parts, char *err) {
    rlxc_model *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, RLXC_ERRLEN, "out of memory");
        return NULL;
    }
    m->p = p;
    m->parts = *parts;
    if (!m->parts.lm_head.data) m->parts.lm_head = m->parts.embed; /* tied */
    m->parts.lm_head.packed = NULL; /* the model's own (rlxc_weight_pack) */
    return m;
}

void rlxc_model_free(rlxc_model *m) {
    if (m) rlxc_weight_unpack(&m->parts.lm_head);
    free(m);
}

rlxc_pipeline *rlxc_model_pipeline(const rlxc_model *m) { return m->p; }
int rlxc_model_vocab(const rlxc_model *m) { return m->parts.embed.rows; }
int rlxc_model_n_logits(const rlxc_model *m) { return m->parts.lm_head.rows; }

static int check_matrix(const rlxc_weight *w, const char *name, int rows, int cols, int multiplied, char *err) {
    if (!w->data) FAIL("the model has no %s", name);
    if ((rows >= 0 && w->rows != rows) || w->cols != cols)
        FAIL("%s is %d x %d, the model needs %d x %d", name, w->rows, w->cols, rows >= 0 ? rows : w->rows, cols);
    if (!rlxc_wtype_block_size(w->type) || w->cols % rlxc_wtype_block_size(w->type))
        FAIL("%s: type %s with %d columns is no rlxc weight", name, rlxc_wtype_name(w->type), w->cols);
    if (multiplied && !rlxc_wtype_runs(w->type))
        FAIL("%s: the active kernels do not multiply %s weights", name, rlxc_wtype_name(w->type));
    return 0;
}

/* The parts against the layers as they are now (layers may have been edited since creation). */
static int check_parts(const rlxc_model *m, char *err) {
    const rlxc_model_parts *mp = &m->parts;
    const int H = rlxc_pipeline_hidden_size(m->p);
    if (check_matrix(&mp->embed, "embedding", -1, H, 0, err) || check_matrix(&mp->lm_head, "lm_head", -1, H, 1, err))
        return -1;
    if (mp->norm.data && (mp->norm.type != RLXC_F32 || mp->norm.cols != H))
        FAIL("the final norm weight must be %d float32 values", H);
    if (mp->norm_bias.data && (mp->norm_bias.type != RLXC_F32 || mp->norm_bias.cols != H || !mp->norm.data))
        FAIL("the final norm bias must be %d float32 values, with a norm weight", H);
    const size_t stride = rlxc_pipeline_ple_stride(m->p);
    if (!mp->ple_embed.data) {
        if (stride) FAIL("the layers take per-layer inputs (ple_dim > 0) but the model has no per-layer embedding");
        return 0;
    }
    if (stride > RLXC_MAX_COUNT) FAIL("per-layer inputs of %zu floats per token are more than rlxc handles", stride);
    if (check_matrix(&mp->ple_embed, "per-layer embedding", -1, (int)stride, 0, err) ||
        check_matrix(&mp->ple_proj, "per-layer projection", (int)stride, H, 1, err))
        return -1;
    for (int i = 0; i < m->p->n_layers; i++) {
        const int P = m->p->layers[i]->ple_dim;
        if (P && (mp->ple_norm.type != RLXC_F32 || mp->ple_norm.cols != P || !mp->ple_norm.data))
            FAIL("layer %d has ple_dim %d: the per-layer projection norm must be %d float32 values", i, P, P);
    }
    return 0;
}

typedef struct {
    rlxc_model *m;
    const int32_t *ids;
    int T, pos0, first, rows; /* logits of tokens first .. first + rows - 1 */
    float *logits;
    rlxc_trace trace;         /* this pass's rows of the caller's trace (pointers NULL: none) */
    int trace_T;              /* tokens per layer in trace.layers */
} model_call;

/* Gemma 4 per-layer inputs of T tokens into ple[T][stride] (tok: scratch of the same size). */
static void per_layer_inputs(const rlxc_team *tm, const model_call *c, const float *x, float *ple, float *tok) {
    const rlxc_kernels *kn = rlxc_kernels_active();
    const rlxc_model_parts *mp = &c->m->parts;
    const rlxc_pipeline *p = c->m->p;
    const size_t stride = rlxc_pipeline_ple_stride(p), eb = rlxc_wtype_row_bytes(mp->ple_embed.type, (int)stride);
    size_t a, e;
    rlxc_team_share(tm, (size_t)c->T, 1, &a, &e);
    for (size_t t = a; t < e; t++)
        rlxc_dequantize_row(mp->ple_embed.type, tok + t * stride, (const char *)mp->ple_embed.data + c->ids[t] * eb,
                            (int)stride);
    rlxc_products(c->m->p, tm, x, c->T, p->layers[0]->hidden_size, &(rlxc_product){ple, &mp->ple_proj, NULL}, 1);
    rlxc_team_sync(tm);
    /* items: (token, layer) slices */
    rlxc_team_share(tm, (size_t)c->T * p->n_layers, 1, &a, &e);
    for (size_t it = a; it < e; it++) {
        const size_t t = it / p->n_layers;
        const int i = (int)(it % p->n_layers), P = p->layers[i]->ple_dim;
        if (!P) continue;
        size_t off = 0;
        for (int k = 0; k < i; k++) off += p->layers[k]->ple_dim;
        float *s = ple + t * stride + off, *tk = tok + t * stride + off;
        kn->scale(s, mp->ple_proj_scale, P);
        kn->rmsnorm(s, s, mp->ple_norm.data, 0.0f, mp->ple_eps, P);
        kn->scale(tk, mp->ple_embed_scale, P);
        kn->add(s, tk, P);
        kn->scale(s, mp->ple_input_scale, P);
    }
    rlxc_team_sync(tm);
}

/* The final softcap on the logits [r0, r1) of each row a thread computed. */
typedef struct {
    float *logits;
    int V, rows;
    float cap;
} softcap_rows;

static void softcap_logits(void *ctx, int r0, int r1) {
    const softcap_rows *c = ctx;
    for (int r = 0; r < c->rows; r++) rlxc_kernels_active()->softcap(c->logits + (size_t)r * c->V + r0, c->cap, r1 - r0);
}

static void model_team(const rlxc_team *tm, void *arg) {
    const model_call *c = arg;
    const rlxc_kernels *kn = rlxc_kernels_active();
    rlxc_pipeline *p = c->m->p;
    const rlxc_model_parts *mp = &c->m->parts;
    const int T = c->T, H = p->layers[0]->hidden_size;
    const size_t stride = rlxc_pipeline_ple_stride(p);
    float *x = rlxc_pipeline_extra(p, T), *normed = x + (size_t)T * H, *ple = normed + (size_t)T * H;
    size_t t0, t1;
    rlxc_team_time(tm, RLXC_TIME_EMBED);
    rlxc_team_share(tm, (size_t)T, 1, &t0, &t1);
    for (size_t t = t0; t < t1; t++) {
        float *xt = x + t * H;
        /* a tied embedding's rows come from the lm_head's packed copy once it has one */
        rlxc_weight_row(mp->lm_head.data == mp->embed.data ? &mp->lm_head : &mp->embed, c->ids[t], xt);
        if (mp->embed_scale != 1.0f) kn->scale(xt, mp->embed_scale, H);
        if (c->trace.embeddings) memcpy(c->trace.embeddings + t * H, xt, H * sizeof(float));
    }
    rlxc_tap(p, tm, -1, RLXC_STAGE_EMBED, x, T, c->pos0, H);
    if (stride) {
        rlxc_team_sync(tm);
        per_layer_inputs(tm, c, x, ple, ple + stride * T);
    }
    rlxc_pipeline_layers(p, tm, x, stride ? ple : NULL, T, c->pos0, c->trace.layers, c->trace_T);
    if (!c->rows) return;

    /* final norm of the rows that get logits, then the lm_head's rows split over the team */
    rlxc_team_time(tm, RLXC_TIME_LM_HEAD);
    const float *last = x + (size_t)c->first * H;
    rlxc_team_share(tm, (size_t)c->rows, 1, &t0, &t1);
    if (c->rows == 1 && c->first != 0) rlxc_team_sync(tm); /* x's last row is another thread's */
    for (size_t r = t0; r < t1; r++) {
        const float *xr = last + r * H;
        float *nr = normed + r * H;
        if (!mp->norm.data) memcpy(nr, xr, H * sizeof(float));
        else if (mp->norm_type == RLXC_LAYERNORM)
            kn->layernorm(nr, xr, mp->norm.data, mp->norm_bias.data, mp->norm_eps, H);
        else kn->rmsnorm(nr, xr, mp->norm.data, mp->norm_offset, mp->norm_eps, H);
        if (c->trace.final_norm) memcpy(c->trace.final_norm + r * H, nr, H * sizeof(float));
    }
    rlxc_team_sync(tm);
    rlxc_tap(p, tm, -1, RLXC_STAGE_FINAL_NORM, normed, c->rows, c->pos0 + c->first, H);
    const rlxc_weight *lm = &mp->lm_head;
    softcap_rows cap = {c->logits, lm->rows, c->rows, mp->final_softcap};
    rlxc_products_alike(p, tm, normed, c->rows, H, &(rlxc_product){c->logits, lm, NULL}, 1,
                        mp->final_softcap > 0.0f ? softcap_logits : NULL, &cap);
    rlxc_tap(p, tm, -1, RLXC_STAGE_LOGITS, c->logits, c->rows, c->pos0 + c->first, (size_t)lm->rows);
}

/* Every id has an embedding row (and a per-layer one). */
static int check_ids(const rlxc_model *m, const int32_t *ids, int T, char *err) {
    const int V = m->parts.embed.rows;
    const int ple_rows = m->parts.ple_embed.data ? m->parts.ple_embed.rows : V;
    for (int t = 0; t < T; t++) {
        if (ids[t] < 0 || ids[t] >= V) FAIL("token id %d is outside the vocabulary [0, %d)", (int)ids[t], V);
        if (ids[t] >= ple_rows)
            FAIL("token id %d is past the per-layer embedding's %d rows", (int)ids[t], ple_rows);
    }
    return 0;
}

/* T tokens at positions n_past.. in passes of at most ubatch tokens, each appended to the cache
 * before the next; a failed pass leaves n_past as it was. */
static int run(rlxc_model *m, const int32_t *ids, int T, rlxc_logits which, float *logits, const rlxc_trace *trace,
               char *err) {
    rlxc_pipeline *p = m->p;
    if (check_parts(m, err) || check_ids(m, ids, T, err)) return -1;
    const size_t H = rlxc_pipeline_hidden_size(p), NL = m->parts.lm_head.rows;
    if (which == RLXC_LOGITS_ALL && (size_t)T * NL > RLXC_MAX_COUNT)
        FAIL("%d tokens of %zu logits exceed what one call can hold: ask for the last logits only or split the prefill",
             T, NL);
    const size_t extra = 2 * H + 2 * rlxc_pipeline_ple_stride(p);
    const int n0 = p->n_past;
    for (int t = 0; t < T; t += p->ubatch) {
        const int n = T - t < p->ubatch ? T - t : p->ubatch, last = t + n == T;
        if (rlxc_pipeline_begin(p, n, extra, p->n_threads, err)) break;
        if (p->act == RLXC_ACT_Q8) rlxc_weight_pack(&m->parts.lm_head, 1);
        model_call c = {m, ids + t, n, p->n_past, 0, 0, NULL, {NULL, NULL, NULL}, T};
        if (which == RLXC_LOGITS_ALL) c.rows = n, c.logits = logits + t * NL;
        else if (which == RLXC_LOGITS_LAST && last) c.first = n - 1, c.rows = 1, c.logits = logits;
        if (trace)
            c.trace = (rlxc_trace){trace->embeddings ? trace->embeddings + t * H : NULL,
                                   trace->layers ? trace->layers + t * H : NULL,
                                   trace->final_norm ? trace->final_norm + t * H : NULL};
        rlxc_team_run(p->n_threads, model_team, &c);
        if (rlxc_taps_failed(p, err)) break;
        p->n_past += n;
    }
    if (p->n_past == n0 + T) return 0;
    p->n_past = n0;
    return -1;
}

int rlxc_model_prefill(rlxc_model *m, const int32_t *ids, int T, rlxc_logits which, float *logits,
                       const rlxc_trace *trace, char *err) {
    rlxc_pipeline *p = m->p;
    if (T <= 0) FAIL("prefill needs at least one token, got T=%d", T);
    if (p->n_past + T > p->max_seq)
        FAIL("prefill of %d tokens at position %d would exceed max_seq=%d", T, p->n_past, p->max_seq);
    if (trace && trace->final_norm && which != RLXC_LOGITS_ALL) FAIL("a trace of the final norm needs every logit");
    return run(m, ids, T, which, logits, trace, err);
}

int rlxc_model_decode(rlxc_model *m, int32_t id, int pos, float *logits, char *err) {
    int n_past;
    if (rlxc_pipeline_seek(m->p, pos, &n_past, err)) return -1;
    if (!run(m, &id, 1, RLXC_LOGITS_ALL, logits, NULL, err)) return 0;
    m->p->n_past = n_past;
    return -1;
}

int rlxc_model_decode_batch(rlxc_model *m, const int32_t *seqs, const int32_t *ids, int B, float *logits, char *err) {
    rlxc_pipeline *p = m->p;
    if (B <= 0) FAIL("a batch needs at least one token, got B=%d", B);
    if (B > p->n_seq) FAIL("a batch of %d tokens needs %d sequences, the model has %d", B, B, p->n_seq);
    for (int i = 0; p->tap_fn && i <= p->n_layers; i++)
        if (p->tap_masks[i]) FAIL("hooks, collected stages and patches do not run in a batch: decode one sequence at a time");
    if (check_parts(m, err) || check_ids(m, ids, B, err)) return -1;
    for (int b = 0; b < B; b++) {
        if (seqs[b] < 0 || seqs[b] >= p->n_seq) FAIL("sequence %d does not exist (the model has %d)", (int)seqs[b], p->n_seq);
        for (int c = 0; c < b; c++)
            if (seqs[c] == seqs[b]) FAIL("sequence %d appears twice in the batch", (int)seqs[b]);
        if (rlxc_pipeline_seq_past(p, seqs[b]) >= p->max_seq)
            FAIL("sequence %d is full (max_seq=%d)", (int)seqs[b], p->max_seq);
    }
    if ((size_t)B * m->parts.lm_head.rows > RLXC_MAX_COUNT) FAIL("%d rows of logits exceed what one call can hold", B);
    if (B > p->cap_batch) {
        int *pos = realloc(p->batch_pos, (size_t)B * sizeof *pos);
        if (!pos) FAIL("out of memory for a batch of %d", B);
        p->batch_pos = pos, p->cap_batch = B;
    }
    p->seq_past[p->seq] = p->n_past;
    for (int b = 0; b < B; b++) p->batch_pos[b] = p->seq_past[seqs[b]];
    const size_t H = rlxc_pipeline_hidden_size(p);
    if (rlxc_pipeline_begin(p, B, 2 * H + 2 * rlxc_pipeline_ple_stride(p), p->n_threads, err)) return -1;
    if (p->act == RLXC_ACT_Q8) rlxc_weight_pack(&m->parts.lm_head, 1);
    model_call c = {m, ids, B, 0, 0, B, logits, {NULL, NULL, NULL}, B};
    p->batch_seq = seqs;
    rlxc_team_run(p->n_threads, model_team, &c);
    p->batch_seq = NULL;
    for (int b = 0; b < B; b++) p->seq_past[seqs[b]]++;
    p->n_past = p->seq_past[p->seq];
    return 0;
}
