/* The per-layer KV caches: their size, storage type and layout, where a position lives, and
 * the views a caller reads and edits them through.
 *
 * A layer with full attention keeps every position: row p of each head holds position p. A
 * windowed layer (sliding_window W > 0) needs only the last W positions before each query, and
 * a call runs at most ubatch tokens at once, so it keeps cells = W - 1 + ubatch positions in a
 * ring (position p in cell p % cells) when that is less than max_seq. Cells c < W - 1 are
 * written twice, at rows c and c + cells: then any W consecutive positions are one stretch of
 * contiguous rows, and the attention kernels read a window exactly as they read a full cache,
 * in the same order, with the same bits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "engine.h"
#include "kernels.h"

#define FAIL(...) do { snprintf(err, RLXC_ERRLEN, __VA_ARGS__); return -1; } while (0)


/* The cells layer i's own cache should have under the pipeline's settings: a ring where its
 * rows (cells and W - 1 mirrors) take less than max_seq. */
static int wanted_cells(const rlxc_pipeline *p, int i) {
    const long long W = p->layers[i]->sliding_window;
    if (p->kv_ring && W > 0 && 2 * W - 2 + p->ubatch < p->max_seq) return (int)W - 1 + p->ubatch;
    return p->max_seq;
}

static int is_ring(const rlxc_kv_cache *c) { return c->window > 0; }

/* Rows of layer i's cache: cells, and for a ring the W - 1 mirrored cells after them. */
static int wanted_rows(const rlxc_pipeline *p, int i) {
    const int cells = wanted_cells(p, i);
    return cells < p->max_seq ? cells + p->layers[i]->sliding_window - 1 : cells;
}

static size_t cache_bytes(const rlxc_pipeline *p, int i) {
    const rlxc_layer *l = p->layers[i];
    return (size_t)l->num_kv_heads * wanted_rows(p, i) * rlxc_wtype_row_bytes(p->kv_type, l->head_dim);
}

size_t rlxc_pipeline_kv_bytes(const rlxc_pipeline *p) {
    size_t n = 0;
    for (int i = 0; i < p->n_layers; i++)
        if (p->layers[i]->kv_shared_from < 0) n += 2 * cache_bytes(p, i);
    return n * (size_t)p->n_seq;
}

void rlxc_kv_free(rlxc_pipeline *p) {
    for (size_t i = 0; p->kv_all && i < (size_t)p->n_seq * p->n_layers; i++) {
        free(p->kv_all[i].k);
        free(p->kv_all[i].v);
        memset(&p->kv_all[i], 0, sizeof p->kv_all[i]);
    }
}

rlxc_kv_cache *rlxc_kv_of(const rlxc_pipeline *p, int li, int t) {
    const int src = p->layers[li]->kv_shared_from >= 0 ? p->layers[li]->kv_shared_from : li;
    return p->batch_seq ? &p->kv_all[(size_t)p->batch_seq[t] * p->n_layers + src] : &p->kv[src];
}

/* A block type stores whole blocks: head_dim must be a multiple of its block size. */
static int check_type(const rlxc_pipeline *p, int i, char *err) {
    const rlxc_layer *l = p->layers[i];
    const int blk = rlxc_wtype_block_size(p->kv_type);
    if (l->kv_shared_from < 0 && l->head_dim % blk)
        FAIL("kv_type %s stores K/V in blocks of %d: layer %d's head_dim %d is not a multiple of %d (use f16)",
             rlxc_wtype_name(p->kv_type), blk, i, l->head_dim, blk);
    return 0;
}

int rlxc_kv_alloc(rlxc_pipeline *p, char *err) {
    for (int i = 0; i < p->n_layers; i++)
        if (check_type(p, i, err)) return -1;
    const size_t total = rlxc_pipeline_kv_bytes(p);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && total > (size_t)pages * (size_t)page)
        FAIL("the KV caches of max_seq=%d tokens%s need %.1f GB, more than this machine's %.1f GB of memory: lower "
             "max_seq or use a smaller kv_type", p->max_seq, p->n_seq > 1 ? " of every sequence" : "", total / 1e9,
             (double)pages * page / 1e9);
    rlxc_kv_free(p);
    for (size_t j = 0; j < (size_t)p->n_seq * p->n_layers; j++) {
        const int i = (int)(j % p->n_layers);
        const rlxc_layer *l = p->layers[i];
        rlxc_kv_cache *c = &p->kv_all[j];
        c->shared = l->kv_shared_from >= 0;
        if (c->shared) continue;
        /* calloc of a large block maps zero pages on demand: a long context costs memory as it fills */
        c->k = calloc(cache_bytes(p, i), 1);
        c->v = calloc(cache_bytes(p, i), 1);
        if (!c->k || !c->v) {
            snprintf(err, RLXC_ERRLEN, "out of memory for layer %d's KV cache (%zu bytes)", i, 2 * cache_bytes(p, i));
            return -2;
        }
        c->heads = l->num_kv_heads;
        c->dim = l->head_dim;
        c->type = p->kv_type;
        c->cells = wanted_cells(p, i);
        c->rows = wanted_rows(p, i);
        c->window = c->cells < p->max_seq ? l->sliding_window : 0;
    }
    return 0;
}

/* Layer i's own cache has the sharing, K/V shape and type the layer and the settings ask for
 * (its ring may still be of another size). */
static int same_shape(const rlxc_pipeline *p, int i) {
    const rlxc_layer *l = p->layers[i];
    const rlxc_kv_cache *c = &p->kv[i];
    const int own = l->kv_shared_from < 0;
    return own == (c->k != NULL) &&
           (!own || (c->heads == l->num_kv_heads && c->dim == l->head_dim && c->type == p->kv_type));
}

int rlxc_pipeline_kv_reshaped(const rlxc_pipeline *p) {
    for (int i = 0; i < p->n_layers; i++)
        if (!same_shape(p, i) || (p->kv[i].k && p->kv[i].cells != wanted_cells(p, i))) return 1;
    return 0;
}

int rlxc_kv_refresh(rlxc_pipeline *p, char *err) {
    if (p->n_past || p->kv_exported || !rlxc_pipeline_kv_reshaped(p)) return 0;
    for (int s = 0; s < p->n_seq; s++)
        if (rlxc_pipeline_seq_past(p, s)) return 0; /* another sequence's tokens would be lost */
    for (int i = 0; i < p->n_layers; i++) {
        if (rlxc_layer_check_fields(p->layers[i], err)) return 0; /* the call's checks report it */
        /* K/V shapes, sharing and the settings change at reset() only, as they always did */
        if (!same_shape(p, i)) return 0;
    }
    return rlxc_kv_alloc(p, err);
}

int rlxc_kv_check(const rlxc_pipeline *p, int i, char *err) {
    const rlxc_layer *l = p->layers[i];
    const int src = l->kv_shared_from;
    const rlxc_kv_cache *c = &p->kv[src >= 0 ? src : i];
    /* a layer that switched between own and shared K/V has a cache with gaps */
    if (!c->k || c->heads != l->num_kv_heads || c->dim != l->head_dim || p->kv[i].shared != (src >= 0) ||
        c->type != p->kv_type)
        FAIL("layer %d's K/V shape (num_kv_heads * head_dim), kv_shared_from or the pipeline's KV settings changed "
             "since its cache was allocated, with tokens in it: call reset()", i);
    if (!is_ring(c) || (l->sliding_window > 0 && l->sliding_window <= c->window)) return 0;
    if (src >= 0)
        FAIL("layer %d reads layer %d's K/V, which keeps only its last %d positions (window %d): layer %d needs a "
             "sliding_window of at most %d (or kv_ring = False)", i, src, c->cells, c->window, i, c->window);
    FAIL("layer %d's window grew past what its cache keeps (%d positions for a window of %d) with tokens in it: "
         "call reset()", i, c->cells, c->window);
}

/* The row of position pos: a stretch of rows from here holds the positions after it too. */
size_t rlxc_kv_row(const rlxc_kv_cache *c, int pos) { return is_ring(c) ? (size_t)(pos % c->cells) : (size_t)pos; }

void *rlxc_kv_at(const rlxc_kv_cache *c, void *base, int h, size_t row) {
    return (char *)base + ((size_t)h * c->rows + row) * rlxc_wtype_row_bytes(c->type, c->dim);
}

static void put_row(const rlxc_kv_cache *c, void *dst, const float *x) { rlxc_quantize_row(c->type, dst, x, c->dim); }

void rlxc_kv_store(const rlxc_kv_cache *c, int h, int pos, const float *k, const float *v) {
    const size_t row = rlxc_kv_row(c, pos);
    put_row(c, rlxc_kv_at(c, c->k, h, row), k);
    put_row(c, rlxc_kv_at(c, c->v, h, row), v);
    if (is_ring(c) && row < (size_t)c->window - 1) {
        put_row(c, rlxc_kv_at(c, c->k, h, row + c->cells), k);
        put_row(c, rlxc_kv_at(c, c->v, h, row + c->cells), v);
    }
}

const float *rlxc_kv_row_f32(const rlxc_kv_cache *c, const void *base, int h, size_t row, float *tmp) {
    const void *at = rlxc_kv_at(c, (void *)base, h, row);
    if (c->type == RLXC_F32) return at;
    rlxc_dequantize_row(c->type, tmp, at, c->dim);
    return tmp;
}

int rlxc_kv_check_rewind(const rlxc_pipeline *p, int pos, char *err) {
    if (pos >= p->n_past) return 0;
    for (int i = 0; i < p->n_layers; i++) {
        const rlxc_layer *l = p->layers[i];
        const rlxc_kv_cache *c = &p->kv[l->kv_shared_from >= 0 ? l->kv_shared_from : i];
        if (!is_ring(c)) continue;
        const int oldest = pos - l->sliding_window + 1 > 0 ? pos - l->sliding_window + 1 : 0;
        if (pos > 0 && oldest + c->cells <= p->n_past - 1)
            FAIL("decoding position %d rewinds %d tokens, but layer %d keeps only its last %d positions (window %d "
                 "plus a pass of %d tokens): rewind at most %d tokens, or reset()", pos, p->n_past - pos, i, c->cells,
                 l->sliding_window, p->ubatch, c->cells - l->sliding_window + 1);
    }
    return 0;
}

/* Positions a view shows: all of a full cache's, a ring's last W (all that later tokens see). */
static int kept(const rlxc_pipeline *p, const rlxc_kv_cache *c) {
    const int n = is_ring(c) ? c->window : c->cells;
    return p->n_past < n ? p->n_past : n;
}

int rlxc_pipeline_kv(rlxc_pipeline *p, int i, rlxc_kv_view *out) {
    const int src = p->kv[i].shared && p->layers[i]->kv_shared_from >= 0 ? p->layers[i]->kv_shared_from : i;
    const rlxc_kv_cache *c = &p->kv[src];
    const int n = kept(p, c);
    *out = (rlxc_kv_view){.k = c->k, .v = c->v, .type = c->type, .heads = c->heads, .dim = c->dim, .rows = c->rows,
                          .first = c->k ? (int)rlxc_kv_row(c, p->n_past - n) : 0, .n = n};
    p->kv_exported = 1;
    return src;
}

/* Ring rows written through a view: copy the viewed rows to their mirrors (where they have one). */
static void sync_mirrors(rlxc_pipeline *p) {
    for (int i = 0; i < p->n_layers; i++) {
        const rlxc_kv_cache *c = &p->kv[i];
        if (!c->k || !is_ring(c)) continue;
        const int n = kept(p, c);
        const size_t first = rlxc_kv_row(c, p->n_past - n), bytes = rlxc_wtype_row_bytes(c->type, c->dim);
        for (int h = 0; h < c->heads; h++)
            for (size_t r = first; r < first + (size_t)n; r++) {
                const size_t cell = r < (size_t)c->cells ? r : r - c->cells;
                if (cell >= (size_t)c->window - 1) continue;
                const size_t m = r < (size_t)c->cells ? r + c->cells : r - c->cells;
                memcpy(rlxc_kv_at(c, c->k, h, m), rlxc_kv_at(c, c->k, h, r), bytes);
                memcpy(rlxc_kv_at(c, c->v, h, m), rlxc_kv_at(c, c->v, h, r), bytes);
            }
    }
}

void rlxc_kv_sync(rlxc_pipeline *p) {
    if (p->kv_exported) sync_mirrors(p);
}

void rlxc_pipeline_kv_released(rlxc_pipeline *p) {
    rlxc_kv_sync(p);
    p->kv_exported = 0;
}

int rlxc_pipeline_set_kv(rlxc_pipeline *p, rlxc_wtype type, int ring, int ubatch, char *err) {
    if (type != RLXC_F32 && type != RLXC_F16 && type != RLXC_BF16 && type != RLXC_Q8_0)
        FAIL("kv_type must be f32, f16, bf16 or q8_0, got %s", rlxc_wtype_name(type));
    if (ubatch < 1) FAIL("ubatch must be >= 1, got %d", ubatch);
    p->kv_type = type;
    p->kv_ring = ring != 0;
    p->ubatch = ubatch;
    return 0;
}

void rlxc_pipeline_get_kv(const rlxc_pipeline *p, rlxc_wtype *type, int *ring, int *ubatch) {
    *type = p->kv_type;
    *ring = p->kv_ring;
    *ubatch = p->ubatch;
}
