/* attention.c: KV cache append and causal attention (MHA / GQA / MQA). */
#include "config.h"
#include <math.h>
#include <string.h>
#include "spi_common.h"
#include "kernels/cpu/sp_kern.h"
#include "kernels/spi_conv.h"

static sp_status kv_check(const sp_kern_kv *kv)
{
    if (!kv || !kv->k || !kv->v || kv->B <= 0 || kv->ctx_max <= 0 || kv->KVHl <= 0 || kv->D <= 0)
        return spi_fail(SP_EINVAL, "KV cache is not set up");
    if (kv->dt != SP_DT_F32 && kv->dt != SP_DT_BF16)
        return spi_fail(SP_ENOTSUP, "KV cache dtype %s not supported (F32 or BF16)", sp_dtype_name(kv->dt));
    return SP_OK;
}

sp_status sp_kern_kv_append(sp_kern_kv *kv, const float *k, const float *v, int64_t Lq, int64_t pos0)
{
    SP_CHECK(kv_check(kv));
    if (Lq < 0 || pos0 < 0 || pos0 + Lq > kv->ctx_max)
        return spi_fail(SP_EINVAL, "KV append of %lld tokens at %lld overflows the cache of %lld", (long long)Lq,
                        (long long)pos0, (long long)kv->ctx_max);
    int64_t row = kv->KVHl * kv->D;   // elements per (b, position)
    for (int64_t b = 0; b < kv->B; b++) {
        for (int64_t i = 0; i < Lq; i++) {
            const float *ks = k + (b * Lq + i) * row, *vs = v + (b * Lq + i) * row;   // (KVHl, D)
            int64_t off = (b * kv->ctx_max + pos0 + i) * row;
            if (kv->dt == SP_DT_F32) {
                memcpy((float *)kv->k + off, ks, (size_t)row * sizeof(float));
                memcpy((float *)kv->v + off, vs, (size_t)row * sizeof(float));
            } else {
                uint16_t *kd = (uint16_t *)kv->k + off, *vd = (uint16_t *)kv->v + off;
                for (int64_t j = 0; j < row; j++) {
                    kd[j] = spi_f32_to_bf16(ks[j]);
                    vd[j] = spi_f32_to_bf16(vs[j]);
                }
            }
        }
    }
    return SP_OK;
}

size_t sp_kern_attention_scratch_bytes(int64_t ctx_max)
{
    return (size_t)(ctx_max > 0 ? ctx_max : 0) * sizeof(float);
}

static inline float kv_at(const sp_kern_kv *kv, const void *base, int64_t off)
{
    return kv->dt == SP_DT_F32 ? ((const float *)base)[off] : spi_bf16_to_f32(((const uint16_t *)base)[off]);
}

sp_status sp_kern_attention(float *out, const float *q, const sp_kern_kv *kv, int64_t Lq, int64_t pos0,
                            int64_t H, int64_t KVH, int64_t h0, int64_t Hl, int64_t kv0,
                            void *scratch, size_t scratch_bytes)
{
    SP_CHECK(kv_check(kv));
    if (H <= 0 || KVH <= 0 || H % KVH)
        return spi_fail(SP_EINVAL, "attention: n_heads %lld must be a multiple of n_kv_heads %lld", (long long)H,
                        (long long)KVH);
    if (h0 < 0 || Hl <= 0 || h0 + Hl > H || kv0 < 0 || kv0 + kv->KVHl > KVH)
        return spi_fail(SP_EINVAL, "attention: heads [%lld, %lld) of %lld or kv heads [%lld, %lld) of %lld out of range",
                        (long long)h0, (long long)(h0 + Hl), (long long)H, (long long)kv0,
                        (long long)(kv0 + kv->KVHl), (long long)KVH);
    int64_t kv_mul = H / KVH;
    if (h0 / kv_mul < kv0 || (h0 + Hl - 1) / kv_mul >= kv0 + kv->KVHl)
        return spi_fail(SP_EINVAL, "attention: query heads [%lld, %lld) need kv heads [%lld, %lld], cache holds [%lld, %lld)",
                        (long long)h0, (long long)(h0 + Hl), (long long)(h0 / kv_mul),
                        (long long)((h0 + Hl - 1) / kv_mul), (long long)kv0, (long long)(kv0 + kv->KVHl));
    if (Lq < 0 || pos0 < 0 || pos0 + Lq > kv->ctx_max)
        return spi_fail(SP_EINVAL, "attention: positions up to %lld exceed the cache of %lld",
                        (long long)(pos0 + Lq), (long long)kv->ctx_max);
    if (!scratch || scratch_bytes < sp_kern_attention_scratch_bytes(pos0 + Lq))
        return spi_fail(SP_EINVAL, "attention: scratch of %zu bytes, %zu needed", scratch_bytes,
                        sp_kern_attention_scratch_bytes(pos0 + Lq));
    int64_t D = kv->D, KVHl = kv->KVHl;
    float *att = scratch;   // (pos0 + Lq)
    float scale = 1.0f / sqrtf((float)D);
    for (int64_t b = 0; b < kv->B; b++) {
        for (int64_t i = 0; i < Lq; i++) {
            int64_t n_keys = pos0 + i + 1;
            for (int64_t hl = 0; hl < Hl; hl++) {
                const float *qv = q + ((b * Lq + i) * Hl + hl) * D;   // (D)
                float *ov = out + ((b * Lq + i) * Hl + hl) * D;       // (D)
                int64_t kvl = (h0 + hl) / kv_mul - kv0;
                // scores = q . k_j * scale, running max
                float mx = -INFINITY;
                for (int64_t j = 0; j < n_keys; j++) {
                    int64_t off = ((b * kv->ctx_max + j) * KVHl + kvl) * D;
                    float s = 0.0f;
                    if (kv->dt == SP_DT_F32) {
                        const float *kr = (const float *)kv->k + off;
                        for (int64_t d = 0; d < D; d++) s += qv[d] * kr[d];
                    } else {
                        for (int64_t d = 0; d < D; d++) s += qv[d] * kv_at(kv, kv->k, off + d);
                    }
                    s *= scale;
                    att[j] = s;
                    if (s > mx) mx = s;
                }
                // softmax with max subtraction
                float sum = 0.0f;
                for (int64_t j = 0; j < n_keys; j++) {
                    att[j] = expf(att[j] - mx);
                    sum += att[j];
                }
                float inv = 1.0f / sum;
                // out = sum_j p_j v_j
                memset(ov, 0, (size_t)D * sizeof *ov);
                for (int64_t j = 0; j < n_keys; j++) {
                    int64_t off = ((b * kv->ctx_max + j) * KVHl + kvl) * D;
                    float p = att[j] * inv;
                    if (kv->dt == SP_DT_F32) {
                        const float *vr = (const float *)kv->v + off;
                        for (int64_t d = 0; d < D; d++) ov[d] += p * vr[d];
                    } else {
                        for (int64_t d = 0; d < D; d++) ov[d] += p * kv_at(kv, kv->v, off + d);
                    }
                }
            }
        }
    }
    return SP_OK;
}
