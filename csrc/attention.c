/* Attention built from blocks of keys (flash attention's structure, exact up to rounding).
 *
 * A query's visible keys are cut at fixed positions into blocks of B keys (B = 64, or the
 * window if smaller, so that a block of a ring is contiguous rows). Each block gives the
 * query a state (max score m, sum of exp l, unnormalized output o: kernels.h attn_block), and
 * the states are merged in block order. The cuts and the order depend on positions only, so a
 * token gets the same bits however its work is shared: in a prefill, where a tile of several
 * tokens and heads reads each block of K/V once for all of them, or decoded alone, where the
 * blocks go to different threads and their states are merged afterwards. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "engine.h"
#include "kernels.h"

#define ATTN_BLOCK 64

int rlxc_attn_block_keys(int window) { return window > 0 && window < ATTN_BLOCK ? window : ATTN_BLOCK; }

/* Floats per query of a block state: o[hd], then m and l. */
static size_t state_floats(int hd) { return (size_t)hd + 2; }

size_t rlxc_attn_scratch_floats(int queries, int hd) {
    const size_t Q = (size_t)queries, B = ATTN_BLOCK;
    /* copies of the queries, a block's and the running states, lo / hi, scores, a block of K and V as floats */
    return Q * hd + 2 * Q * state_floats(hd) + 2 * Q + Q * B + 2 * B * (size_t)hd;
}

size_t rlxc_attn_state_floats(int queries, int hd) { return (size_t)queries * state_floats(hd); }

static int first_pos(const rlxc_attn_tile *t, int tok) {
    const int pos = t->pos0 + tok;
    return t->window > 0 && pos - t->window + 1 > 0 ? pos - t->window + 1 : 0;
}

int rlxc_attn_tile_blocks(const rlxc_attn_tile *t, int *first) {
    const int B = rlxc_attn_block_keys(t->window);
    *first = first_pos(t, 0) / B;
    return (t->pos0 + t->T - 1) / B - *first + 1;
}

/* Scratch of one thread, carved from rlxc_attn_scratch_floats(T * G, hd) floats. */
typedef struct {
    float *q, *o, *run, *s, *kf, *vf;
    int *lo, *hi;
} tile_scratch;

static tile_scratch carve(float *f, int Q, int hd) {
    tile_scratch s;
    const size_t sf = state_floats(hd);
    s.q = f, f += (size_t)Q * hd;
    s.o = f, f += (size_t)Q * sf; /* a block state: o rows [Q][hd], then m[Q], l[Q] */
    s.run = f, f += (size_t)Q * sf;
    s.lo = (int *)f, f += Q;
    s.hi = (int *)f, f += Q;
    s.s = f, f += (size_t)Q * ATTN_BLOCK;
    s.kf = f, f += (size_t)ATTN_BLOCK * hd;
    s.vf = f;
    return s;
}

void rlxc_attn_tile_prepare(const rlxc_attn_tile *t, float *scratch) {
    const int hd = t->c->dim, Q = t->T * t->G;
    tile_scratch s = carve(scratch, Q, hd);
    for (int tok = 0; tok < t->T; tok++)
        memcpy(s.q + (size_t)tok * t->G * hd, t->q + tok * t->q_stride, (size_t)t->G * hd * sizeof(float));
    memset(s.run, 0, (size_t)Q * hd * sizeof(float));
    for (int r = 0; r < Q; r++) {
        s.run[(size_t)Q * hd + r] = -INFINITY;
        s.run[(size_t)Q * hd + Q + r] = 0.0f;
    }
}

/* The states of the tile's queries over block b (absolute: positions [b B, b B + B)) into
 * state: o [Q][hd], m [Q], l [Q]. */
static void block_state(const rlxc_attn_tile *t, int b, tile_scratch *s, float *state) {
    const rlxc_kernels *kn = rlxc_kernels_active();
    const rlxc_kv_cache *c = t->c;
    const int hd = c->dim, Q = t->T * t->G, B = rlxc_attn_block_keys(t->window);
    int x0 = b * B, x1 = b * B + B;
    x0 = x0 > first_pos(t, 0) ? x0 : first_pos(t, 0);
    x1 = x1 < t->pos0 + t->T ? x1 : t->pos0 + t->T;
    for (int tok = 0; tok < t->T; tok++) {
        const int a = first_pos(t, tok) - x0, e = t->pos0 + tok + 1 - x0;
        for (int g = 0; g < t->G; g++) {
            s->lo[tok * t->G + g] = a > 0 ? a : 0;
            s->hi[tok * t->G + g] = e < x1 - x0 ? e : x1 - x0;
        }
    }
    const size_t row = rlxc_kv_row(c, x0);
    const void *k = rlxc_kv_at(c, c->k, t->kvh, row), *v = rlxc_kv_at(c, c->v, t->kvh, row);
    rlxc_attn_block_fn fn = kn->attn_block_f32;
    if (c->type == RLXC_F16) fn = kn->attn_block_f16;
    else if (c->type == RLXC_BF16) fn = kn->attn_block_bf16;
    else if (c->type != RLXC_F32) { /* block types: the block's rows as floats */
        const rlxc_wtype_kernels *wk = &kn->wt[c->type];
        wk->dequantize(s->kf, k, (x1 - x0) * hd);
        wk->dequantize(s->vf, v, (x1 - x0) * hd);
        k = s->kf, v = s->vf;
    }
    fn(state, state + (size_t)Q * hd, state + (size_t)Q * hd + Q, s->q, Q, k, v, x1 - x0, hd, s->lo, s->hi, t->scale,
       t->softcap, s->s);
}

/* run (o, m, l of Q queries) merged with a block state of query r. */
static void merge(float *run, const float *st, int Q, int hd, int r) {
    const float mb = st[(size_t)Q * hd + r];
    if (mb == -INFINITY) return; /* the query sees no key of the block */
    float *o = run + (size_t)r * hd, *m = run + (size_t)Q * hd + r, *l = m + Q;
    const float *ob = st + (size_t)r * hd, lb = st[(size_t)Q * hd + Q + r];
    const float mn = mb > *m ? mb : *m, a = expf(*m - mn), f = expf(mb - mn);
    for (int d = 0; d < hd; d++) o[d] = o[d] * a + ob[d] * f;
    *l = *l * a + lb * f;
    *m = mn;
}

void rlxc_attn_tile_block(const rlxc_attn_tile *t, int b, float *scratch, float *state) {
    tile_scratch s = carve(scratch, t->T * t->G, t->c->dim);
    block_state(t, b, &s, state);
}

void rlxc_attn_tile_merge(const rlxc_attn_tile *t, const float *state, float *scratch, int r) {
    tile_scratch s = carve(scratch, t->T * t->G, t->c->dim);
    merge(s.run, state, t->T * t->G, t->c->dim, r);
}

void rlxc_attn_tile_end(const rlxc_attn_tile *t, float *scratch, int r) {
    const int hd = t->c->dim, Q = t->T * t->G;
    tile_scratch s = carve(scratch, Q, hd);
    const float inv = 1.0f / s.run[(size_t)Q * hd + Q + r];
    float *out = t->out + (r / t->G) * t->q_stride + (size_t)(r % t->G) * hd;
    for (int d = 0; d < hd; d++) out[d] = s.run[(size_t)r * hd + d] * inv;
}

void rlxc_attn_tile_run(const rlxc_attn_tile *t, float *scratch) {
    const int Q = t->T * t->G;
    tile_scratch s = carve(scratch, Q, t->c->dim);
    int first;
    const int nb = rlxc_attn_tile_blocks(t, &first);
    rlxc_attn_tile_prepare(t, scratch);
    for (int b = first; b < first + nb; b++) {
        block_state(t, b, &s, s.o);
        for (int r = 0; r < Q; r++) merge(s.run, s.o, Q, t->c->dim, r);
    }
    for (int r = 0; r < Q; r++) rlxc_attn_tile_end(t, scratch, r);
}

int rlxc_attention(float *out, const float *q, int nq, const float *k, const float *v, int nkv, int S, int hd, int pos,
                   int window, float scale, float softcap) {
    const int group = nq / nkv;
    float *scratch = malloc(rlxc_attn_scratch_floats(group, hd) * sizeof(float));
    if (!scratch) return -1;
    /* k, v as a full f32 cache of S positions, one tile per kv head */
    const rlxc_kv_cache c = {.k = (void *)k, .v = (void *)v, .heads = nkv, .dim = hd, .type = RLXC_F32, .cells = S,
                             .rows = S};
    for (int h = 0; h < nkv; h++) {
        const size_t at = (size_t)h * group * hd;
        const rlxc_attn_tile t = {.c = &c, .kvh = h, .window = window, .q = q + at, .out = out + at,
                                  .q_stride = (size_t)nq * hd, .T = 1, .G = group, .pos0 = pos, .scale = scale,
                                  .softcap = softcap};
        rlxc_attn_tile_run(&t, scratch);
    }
    free(scratch);
    return 0;
}
