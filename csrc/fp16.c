/* IEEE half <-> float by bit manipulation, so the scalar path needs no F16C and
 * rounds exactly like numpy (round to nearest, ties to even). */
#include <string.h>
#include "kernels.h"

static float bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

float rlxc_fp16_to_f32(rlxc_fp16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        /* subnormal: man * 2^-24, exact in float */
        float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

rlxc_fp16 rlxc_f32_to_fp16(float f) {
    uint32_t u = f32_to_bits(f);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t absu = u & 0x7fffffffu;
    if (absu >= 0x7f800000u) /* inf or nan (keep nan quiet) */
        return (rlxc_fp16)(sign | 0x7c00 | (absu > 0x7f800000u ? 0x200 : 0));
    if (absu >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (rlxc_fp16)(sign | 0x7c00);
    if (absu < 0x38800000u) {
        /* result is subnormal or zero: round |f| * 2^24 to an integer, ties to even */
        float a = bits_to_f32(absu) * 16777216.0f; /* exact: a power-of-two scale */
        uint32_t i = (uint32_t)a;
        float rem = a - (float)i;
        if (rem > 0.5f || (rem == 0.5f && (i & 1))) i++;
        return (rlxc_fp16)(sign | i);
    }
    /* normal: drop 13 mantissa bits with round to nearest even */
    uint32_t r = absu + 0xfffu + ((absu >> 13) & 1);
    return (rlxc_fp16)(sign | ((r - 0x38000000u) >> 13));
}

/* bfloat16 is the top half of a float: widening is exact. */
float rlxc_bf16_to_f32(rlxc_bf16 h) { return bits_to_f32((uint32_t)h << 16); }

rlxc_bf16 rlxc_f32_to_bf16(float f) {
    uint32_t u = f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (rlxc_bf16)((u >> 16) | 0x40); /* quiet the NaN */
    return (rlxc_bf16)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);                 /* nearest, ties even */
}
