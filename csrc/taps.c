/* Taps: the named stages of a forward pass and the calls that let a caller read or rewrite
 * them (rlxc_pipeline_set_taps). A stage nobody taps costs one test of a mask bit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine.h"

#define FAIL(...) do { snprintf(err, RLXC_ERRLEN, __VA_ARGS__); return -1; } while (0)

static const char *const stage_names[RLXC_STAGE_COUNT] = {
    [RLXC_STAGE_EMBED] = "embed",           [RLXC_STAGE_RESID_PRE] = "resid_pre",
    [RLXC_STAGE_ATTN_IN] = "attn_in",       [RLXC_STAGE_Q] = "q",
    [RLXC_STAGE_K] = "k",                   [RLXC_STAGE_V] = "v",
    [RLXC_STAGE_ATTN_PROBS] = "attn_probs", [RLXC_STAGE_ATTN_Z] = "attn_z",
    [RLXC_STAGE_ATTN_OUT] = "attn_out",     [RLXC_STAGE_RESID_MID] = "resid_mid",
    [RLXC_STAGE_MLP_IN] = "mlp_in",         [RLXC_STAGE_MLP_ACT] = "mlp_act",
    [RLXC_STAGE_MLP_OUT] = "mlp_out",       [RLXC_STAGE_RESID_POST] = "resid_post",
    [RLXC_STAGE_FINAL_NORM] = "final_norm", [RLXC_STAGE_LOGITS] = "logits",
};

const char *rlxc_stage_name(rlxc_stage s) { return s >= 0 && s < RLXC_STAGE_COUNT ? stage_names[s] : "?"; }

int rlxc_stage_from_name(const char *name) {
    for (int s = 0; s < RLXC_STAGE_COUNT; s++)
        if (!strcmp(name, stage_names[s])) return s;
    return -1;
}

int rlxc_stage_is_model(rlxc_stage s) {
    return s == RLXC_STAGE_EMBED || s == RLXC_STAGE_FINAL_NORM || s == RLXC_STAGE_LOGITS;
}

#define MODEL_STAGES ((1u << RLXC_STAGE_EMBED) | (1u << RLXC_STAGE_FINAL_NORM) | (1u << RLXC_STAGE_LOGITS))
#define ALL_STAGES ((1u << RLXC_STAGE_COUNT) - 1)

int rlxc_pipeline_set_taps(rlxc_pipeline *p, rlxc_tap_fn fn, void *ctx, const uint32_t *masks, char *err) {
    if (!fn) {
        p->tap_fn = NULL;
        memset(p->tap_masks, 0, (p->n_layers + 1) * sizeof *p->tap_masks);
        return 0;
    }
    for (int i = 0; i <= p->n_layers; i++) {
        const uint32_t allowed = i == p->n_layers ? MODEL_STAGES : ALL_STAGES & ~MODEL_STAGES;
        if (masks[i] & ~allowed)
            FAIL("%s cannot tap stage bits 0x%x", i == p->n_layers ? "the model" : "a layer", masks[i] & ~allowed);
        const uint32_t kv = (1u << RLXC_STAGE_K) | (1u << RLXC_STAGE_V);
        if (i < p->n_layers && (masks[i] & kv) && p->layers[i]->kv_shared_from >= 0)
            FAIL("layer %d reads layer %d's K/V: it has no k or v stage of its own", i, p->layers[i]->kv_shared_from);
    }
    memcpy(p->tap_masks, masks, (p->n_layers + 1) * sizeof *p->tap_masks);
    p->tap_fn = fn;
    p->tap_ctx = ctx;
    return 0;
}

int rlxc_tapped(const rlxc_pipeline *p, int li, rlxc_stage s) {
    return p->tap_fn && (p->tap_masks[li < 0 ? p->n_layers : li] >> s & 1u);
}

int rlxc_tap(rlxc_pipeline *p, const rlxc_team *tm, int li, rlxc_stage s, float *data, int T, int pos0, size_t width) {
    if (!rlxc_tapped(p, li, s)) return 0;
    rlxc_team_sync(tm);
    const rlxc_time was = rlxc_team_time(tm, RLXC_TIME_TAPS);
    if (tm->ith == 0 && !p->tap_failed && p->tap_fn(p->tap_ctx, li, s, data, T, pos0, (int)width)) {
        p->tap_failed = 1;
        p->tap_failed_layer = li;
        p->tap_failed_stage = s;
    }
    rlxc_team_sync(tm);
    rlxc_team_time(tm, was);
    return 1;
}

int rlxc_taps_failed(rlxc_pipeline *p, char *err) {
    if (!p->tap_failed) return 0;
    p->tap_failed = 0;
    if (p->tap_failed_layer < 0) FAIL("the tap at stage %s failed", rlxc_stage_name(p->tap_failed_stage));
    FAIL("the tap at stage layers.%d.%s failed", p->tap_failed_layer, rlxc_stage_name(p->tap_failed_stage));
}
