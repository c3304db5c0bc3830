/* Mixture-of-experts feed-forward (rlxc_layer.num_experts > 0). The router picks each token's
 * experts; the tokens are then grouped by expert so that an expert's rows are read once per call
 * whatever the number of its tokens (a decode reads only the chosen experts' rows), and the
 * experts' outputs are summed back per token with their weights. */
#include <math.h>
#include <string.h>
#include "engine.h"
#include "kernels.h"

/* One layer's call of T tokens, R = T * num_experts_used routed rows; (t, j) is token t's j-th
 * expert, at index t * k + j. */
typedef struct {
    float *logits;  /* [T][E], the router's softmax after routing */
    float *weight;  /* [R] */
    float *xr, *xm; /* [T][H]: the router's and the experts' inputs where they have their own norms */
    float *xp;      /* [R][H]: the experts' inputs in expert order (T > 1) */
    float *g, *u;   /* [R][expert_intermediate_size] in expert order */
    float *y;       /* [R][H]: the experts' outputs in expert order */
    float *out;     /* [T][H] */
    int *expert;    /* [R] */
    int *row;       /* [R]: the row of (t, j) in expert order */
    int *token;     /* [R]: the token of each row in expert order */
    int *first;     /* [E + 1]: expert e's rows are first[e] .. first[e + 1] - 1 */
} moe_bufs;

static moe_bufs layout(float *f, int *n, const rlxc_layer *l, int T) {
    const size_t H = l->hidden_size, E = l->num_experts, R = (size_t)T * l->num_experts_used;
    const size_t I = l->expert_intermediate_size;
    moe_bufs b;
    b.logits = f;
    b.weight = f += (size_t)T * E;
    b.xr = f += R;
    b.xm = f += T * H;
    b.xp = f += T * H;
    b.g = f += R * H;
    b.u = f += R * I;
    b.y = f += R * I;
    b.out = f + R * H;
    b.expert = n;
    b.row = n += R;
    b.token = n += R;
    b.first = n + R;
    return b;
}

void rlxc_moe_scratch(const rlxc_layer *l, int T, size_t *floats, size_t *ints) {
    const size_t H = l->hidden_size, E = l->num_experts, R = (size_t)T * l->num_experts_used;
    const size_t I = l->expert_intermediate_size;
    *floats = E ? (size_t)T * E + R + 3 * (size_t)T * H + 2 * R * H + 2 * R * I : 0;
    *ints = E ? 3 * R + E + 1 : 0;
}

/* Expert e's `rows` rows of a stacked matrix, as a weight of its own: its repacked groups where
 * the matrix has them and they do not straddle experts (rlxc_moe_packable). */
static rlxc_weight expert_view(const rlxc_weight *w, int e, int rows) {
    rlxc_weight v = *w;
    v.rows = rows;
    v.borrowed = 1;
    v.data = (char *)w->data + (size_t)e * rows * rlxc_wtype_row_bytes(w->type, w->cols);
    char *packed = __atomic_load_n(&w->packed, __ATOMIC_ACQUIRE);
    v.packed = packed && rows % RLXC_PACK_ROWS == 0
                   ? packed + (size_t)e * (rows / RLXC_PACK_ROWS) * rlxc_x16_type_group_bytes(w->type, w->cols)
                   : NULL;
    return v;
}

int rlxc_moe_packable(const rlxc_layer *l, rlxc_wslot s) {
    if (s == RLXC_W_GATE_EXPS || s == RLXC_W_UP_EXPS) return l->expert_intermediate_size % RLXC_PACK_ROWS == 0;
    if (s == RLXC_W_DOWN_EXPS) return l->hidden_size % RLXC_PACK_ROWS == 0;
    return 1;
}

/* Rows r .. r + n - 1 of a prepared input (row 0 of a one-token input, which each thread holds). */
static rlxc_xin xin_rows(const rlxc_xin *in, int r, int n) {
    rlxc_xin s = *in;
    if (in->T == 1) return s;
    s.x += (size_t)r * in->K;
    for (int f = 0; f < in->n_fmt; f++) {
        s.q[f] = (char *)in->q[f] + (size_t)r * in->row_bytes[f];
        if (in->q[f] == in->q8) s.q8 = s.q[f], s.q8_terms = rlxc_xin_q8_terms_from(in, r);
    }
    s.T = n;
    return s;
}

/* Token t's experts from its router logits z[E] (overwritten): softmax, the k largest
 * probabilities (the lower index first among equals), renormalised if moe_norm_topk, times the
 * expert's scale if set. */
static void route(const rlxc_layer *l, float *z, int *expert, float *weight) {
    const int E = l->num_experts, k = l->num_experts_used;
    const float *scale = l->w[RLXC_W_EXPERT_SCALE].data;
    float m = z[0], sum = 0.0f;
    for (int e = 1; e < E; e++) m = z[e] > m ? z[e] : m;
    for (int e = 0; e < E; e++) sum += z[e] = expf(z[e] - m);
    for (int e = 0; e < E; e++) z[e] /= sum;
    float picked = 0.0f;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (z[e] >= 0.0f && (best < 0 || z[e] > z[best])) best = e;
        if (best < 0) best = j; /* NaN probabilities: any expert (the output is NaN; a repeat is harmless) */
        expert[j] = best;
        picked += weight[j] = z[best] >= 0.0f ? z[best] : NAN;
        z[best] = -1.0f; /* taken */
    }
    for (int j = 0; j < k; j++) {
        if (l->moe_norm_topk) weight[j] /= picked;
        if (scale) weight[j] *= scale[expert[j]];
    }
}

/* Rows in expert order, each expert's tokens in token order. */
static void group(const moe_bufs *b, int R, int k, int E) {
    memset(b->first, 0, (size_t)(E + 1) * sizeof(int));
    for (int r = 0; r < R; r++) b->first[b->expert[r] + 1]++;
    for (int e = 0; e < E; e++) b->first[e + 1] += b->first[e];
    for (int r = 0; r < R; r++) {
        const int at = b->first[b->expert[r]]++;
        b->row[r] = at;
        b->token[at] = r / k;
    }
    for (int e = E; e > 0; e--) b->first[e] = b->first[e - 1]; /* the counting moved each start to the next */
    b->first[0] = 0;
}

float *rlxc_moe(rlxc_pipeline *p, const rlxc_team *tm, int li, const float *x, const float *xa, int T) {
    const rlxc_kernels *kn = rlxc_kernels_active();
    const rlxc_layer *l = p->layers[li];
    const rlxc_weight *w = l->w;
    const int H = l->hidden_size, E = l->num_experts, k = l->num_experts_used, I = l->expert_intermediate_size;
    const int R = T * k;
    const moe_bufs b = layout(p->s.moe, p->s.moe_idx, l, T);
    float *dq = p->s.dq + (size_t)tm->ith * p->dq_stride;
    size_t t0, t1, a, z;
    rlxc_team_share(tm, (size_t)T, 1, &t0, &t1);

    const float *xr = xa, *xe = xa;
    if (w[RLXC_W_ROUTER_NORM].data) {
        for (size_t t = t0; t < t1; t++) kn->rmsnorm(b.xr + t * H, x + t * H, w[RLXC_W_ROUTER_NORM].data, 0.0f, l->eps, H);
        xr = b.xr;
    }
    if (w[RLXC_W_MOE_NORM].data) {
        for (size_t t = t0; t < t1; t++)
            kn->rmsnorm(b.xm + t * H, x + t * H, w[RLXC_W_MOE_NORM].data, l->norm_offset, l->eps, H);
        xe = b.xm;
    }
    /* also: the dense FFN's products are done with the shared activation scratch */
    rlxc_team_sync(tm);
    rlxc_products(p, tm, xr, T, H, &(rlxc_product){b.logits, &w[RLXC_W_ROUTER], NULL}, 1);
    rlxc_team_sync(tm);
    for (size_t t = t0; t < t1; t++) route(l, b.logits + t * E, b.expert + t * k, b.weight + t * k);
    rlxc_team_sync(tm);
    if (tm->ith == 0) group(&b, R, k, E);
    rlxc_team_sync(tm);

    /* gate and up of every chosen expert: each expert's rows split alike, so that each thread
     * activates the rows it computed */
    const float *xin = xe;
    if (T > 1) {
        rlxc_team_share(tm, (size_t)R, 1, &a, &z);
        for (size_t r = a; r < z; r++) memcpy(b.xp + r * H, xe + (size_t)b.token[r] * H, (size_t)H * sizeof(float));
        rlxc_team_sync(tm);
        xin = b.xp;
    }
    rlxc_xin in;
    const rlxc_weight *gate_up[2] = {&w[RLXC_W_GATE_EXPS], &w[RLXC_W_UP_EXPS]};
    rlxc_xin_prepare(tm, &in, xin, T > 1 ? R : 1, H, gate_up, 2, p->act, p->s.xq);
    for (int e = 0; e < E; e++) {
        const int r = b.first[e], n = b.first[e + 1] - r;
        if (!n) continue;
        const rlxc_xin part = xin_rows(&in, r, n);
        const rlxc_weight gw = expert_view(gate_up[0], e, I), uw = expert_view(gate_up[1], e, I);
        const rlxc_product ps[2] = {{b.g + (size_t)r * I, &gw, NULL}, {b.u + (size_t)r * I, &uw, NULL}};
        rlxc_ffn_act act = {l, b.g + (size_t)r * I, b.u + (size_t)r * I, NULL, NULL, 0, (size_t)I, n};
        rlxc_linear_alike(tm, &part, ps, 2, dq, rlxc_ffn_activate, &act);
    }
    rlxc_team_sync(tm);

    /* down of every chosen expert, then each token's weighted sum in its experts' order */
    const rlxc_weight *down = &w[RLXC_W_DOWN_EXPS];
    rlxc_xin_prepare(tm, &in, b.g, R, I, &down, 1, p->act, p->s.xq);
    for (int e = 0; e < E; e++) {
        const int r = b.first[e], n = b.first[e + 1] - r;
        if (!n) continue;
        const rlxc_xin part = xin_rows(&in, r, n);
        const rlxc_weight dw = expert_view(down, e, H);
        rlxc_linear_team(tm, &part, &(rlxc_product){b.y + (size_t)r * H, &dw, NULL}, 1, dq);
    }
    rlxc_team_sync(tm);
    for (size_t t = t0; t < t1; t++) {
        float *o = b.out + t * H;
        memset(o, 0, (size_t)H * sizeof(float));
        for (int j = 0; j < k; j++) {
            const float wj = b.weight[t * k + j], *y = b.y + (size_t)b.row[t * k + j] * H;
            for (int d = 0; d < H; d++) o[d] += wj * y[d];
        }
    }
    return b.out;
}
