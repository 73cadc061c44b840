/* sample.c: greedy, temperature, top-k and top-p sampling with a seeded RNG. */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include "spi_common.h"
#include "kernels/cpu/sp_kern.h"
#include "sp_lower.h"   /* SP_SAMPLE_CAND_BYTES */

uint64_t sp_kern_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

float sp_kern_rng_float(uint64_t *state)
{
    return (float)(sp_kern_rng_next(state) >> 40) / 16777216.0f;
}

int32_t sp_kern_argmax(const float *logits, int64_t V)
{
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (logits[i] > logits[best] || (isnan(logits[best]) && !isnan(logits[i]))) best = i;
    return (int32_t)best;
}

void sp_kern_sample_opts_init(sp_kern_sample_opts *o)
{
    o->temperature = 0.0f;
    o->top_k = 0;
    o->top_p = 1.0f;
    o->seed = 0;
}

typedef struct cand {
    float p;
    int32_t id;
} cand;
_Static_assert(sizeof(cand) == SP_SAMPLE_CAND_BYTES, "the lowering sizes the sampling scratch by SP_SAMPLE_CAND_BYTES");

size_t sp_kern_sample_scratch_bytes(int64_t V)
{
    return (size_t)(V > 0 ? V : 0) * sizeof(cand);
}

/* Descending probability, ties by ascending id: a total order, so qsort is deterministic. */
static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->p > y->p) return -1;
    if (x->p < y->p) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

sp_status sp_kern_sample(const float *logits, int64_t V, const sp_kern_sample_opts *o, uint64_t *rng,
                         void *scratch, size_t scratch_bytes, int32_t *token)
{
    if (!logits || V <= 0 || V > INT32_MAX || !o || !token)
        return spi_fail(SP_EINVAL, "sp_kern_sample: bad arguments (V=%lld)", (long long)V);
    if (o->temperature <= 0.0f) {
        *token = sp_kern_argmax(logits, V);
        return SP_OK;
    }
    if (!rng || !scratch || scratch_bytes < sp_kern_sample_scratch_bytes(V))
        return spi_fail(SP_EINVAL, "sp_kern_sample: rng and %zu bytes of scratch needed",
                        sp_kern_sample_scratch_bytes(V));
    cand *c = scratch;   // (V)
    // softmax(logits / temperature), max-subtracted
    float mx = logits[sp_kern_argmax(logits, V)];
    double sum = 0.0;
    for (int64_t i = 0; i < V; i++) {
        float p = isnan(logits[i]) ? 0.0f : expf((logits[i] - mx) / o->temperature);
        c[i].p = p;
        c[i].id = (int32_t)i;
        sum += p;
    }
    for (int64_t i = 0; i < V; i++) c[i].p = (float)(c[i].p / sum);
    // sort by probability, cut to top-k, then to the top-p nucleus
    qsort(c, (size_t)V, sizeof *c, cand_cmp);
    int64_t n = V;
    if (o->top_k > 0 && o->top_k < n) n = o->top_k;
    double mass = 0.0;
    if (o->top_p < 1.0f) {
        int64_t m = 0;
        for (; m < n; m++) {
            mass += c[m].p;
            if (mass >= o->top_p) { m++; break; }
        }
        n = m > 0 ? m : 1;
    }
    mass = 0.0;
    for (int64_t i = 0; i < n; i++) mass += c[i].p;
    // one draw over the kept candidates
    double u = sp_kern_rng_float(rng) * mass, acc = 0.0;
    for (int64_t i = 0; i < n; i++) {
        acc += c[i].p;
        if (u < acc) {
            *token = c[i].id;
            return SP_OK;
        }
    }
    *token = c[n - 1].id;
    return SP_OK;
}
