/* check_exec.c: the executor under every layout of the table against the
 * single-chip reference: last-step logits within 1e-4 relative, greedy tokens
 * identical, measured bytes == predicted bytes at every communication step. */
#include "config.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "costmodel/sp_cost.h"
#include "exec/sp_exec.h"
#include "exec/sp_ref.h"
#include "exec/spi_exec.h"   /* spi_exec_arena_delta, spi_exec_handoff_fault */
#include <jansson.h>

typedef struct exec_case {
    const char *model;
    const char *layout;
    int64_t B, P, G;
} exec_case;

#define F32 "weights=f32,kv=f32,"
static const exec_case cases[] = {
    {"tiny-llama", "mesh=1x1x1," F32 "prefill=ws1d/heads,decode=ws1d/heads", 2, 5, 16},
    {"tiny-gpt2", "mesh=1x1x1," F32 "prefill=ws2d/heads,decode=ws2d/heads", 2, 5, 16},
    {"tiny-palm", "mesh=1x1x1," F32 "prefill=ws2d/heads,decode=ws2d/heads", 2, 5, 16},
    {"tiny-llama", "mesh=2x1x1," F32 "prefill=ws1d/heads,decode=ws1d/heads", 2, 5, 16},
    {"tiny-llama", "mesh=2x2x1," F32 "prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 16},
    {"tiny-llama", "mesh=2x2x2," F32 "prefill=ws1d/heads,decode=ws1d/heads", 8, 5, 16},
    {"tiny-llama", "mesh=2x2x2," F32 "prefill=ws2d/heads,decode=ws2d/heads", 8, 5, 16},
    {"tiny-gpt2", "mesh=2x2x2," F32 "prefill=wg-xyz/batch,decode=wg-xyz/batch", 8, 5, 16},
    {"tiny-palm", "mesh=2x2x1," F32 "prefill=wg-x/heads,decode=wg-x/heads", 4, 5, 16},
    {"tiny-llama", "stages=2,microbatches=2,mesh=2x1x1," F32 "prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 16},
    /* uneven pipelines: the layers per stage named by the layout */
    {"tiny-llama", "stages=2,microbatches=2,mesh=2x1x1," F32 "prefill=ws1d/heads,decode=ws1d/heads,stage_layers=3,1", 4, 5, 16},
    {"tiny-llama", "stages=3,microbatches=4,mesh=1x1x1," F32 "prefill=ws2d/heads,decode=ws2d/heads,stage_layers=1,2,1", 4, 5, 16},
    {"tiny-gpt2", "replicas=2,mesh=2x1x1," F32 "prefill=ws2d/heads,decode=ws2d/heads", 4, 5, 16},
    {"tiny-palm", "mesh=2x2x2," F32 "prefill=ws1d/heads,decode=ws1d/heads", 8, 5, 16},
    {"tiny-palm", "mesh=2x2x2," F32 "prefill=wg-xy/heads,decode=wg-xy/heads", 8, 5, 16},
    {"tiny-gpt2", "mesh=2x1x2," F32 "prefill=wg-x/heads,decode=wg-x/heads", 4, 5, 16},
    {"tiny-llama", "mesh=2x2x2," F32 "prefill=wg-xyz/heads,decode=wg-xyz/heads", 8, 5, 16},
    {"tiny-gpt2", "mesh=2x2x2," F32 "prefill=wg-xy/heads,decode=wg-xy/heads", 8, 5, 16},
    {"tiny-llama", "mesh=2x2x2," F32 "prefill=wg-xy/heads,decode=ws2d/batch", 8, 5, 16},
    {"tiny-llama", "mesh=1x2x4," F32 "prefill=wg-xy/heads,decode=wg-xy/heads", 8, 5, 16},
    /* all-to-all layouts: batch-sharded attention, prefill heads -> decode batch */
    {"tiny-llama", "mesh=2x2x2," F32 "prefill=ws2d/heads,decode=ws2d/batch", 8, 5, 16},
    {"tiny-palm", "mesh=2x2x2," F32 "prefill=ws2d/heads,decode=ws2d/batch", 8, 5, 16},
    {"tiny-gpt2", "mesh=2x2x1," F32 "prefill=ws2d/batch,decode=ws2d/batch", 4, 5, 16},
    {"tiny-gpt2", "mesh=2x2x2," F32 "prefill=ws1d/heads,decode=ws1d/batch", 8, 5, 16},
    {"tiny-llama", "mesh=2x2x2," F32 "prefill=wg-x/heads,decode=ws2d/batch", 8, 5, 16},
    {"tiny-llama", "mesh=2x2x2," F32 "prefill=wg-xyz/heads,decode=ws2d/batch", 8, 5, 16},
    {"tiny-llama", "mesh=1x2x4," F32 "prefill=ws1d/heads,decode=ws1d/heads", 8, 5, 16},
    {"tiny-llama", "mesh=1x2x4," F32 "prefill=ws2d/heads,decode=ws2d/heads", 8, 5, 16},
    {"tiny-llama", "mesh=1x2x4," F32 "prefill=wg-x/heads,decode=wg-x/heads", 8, 5, 16},
    {"tiny-llama", "mesh=1x2x4," F32 "prefill=wg-xyz/heads,decode=wg-xyz/heads", 8, 5, 16},
    {"tiny-palm", "mesh=1x2x4," F32 "prefill=wg-xy/heads,decode=wg-xy/heads", 8, 5, 16},
    {"tiny-gpt2", "mesh=1x2x4," F32 "prefill=wg-xy/heads,decode=wg-xy/heads", 8, 5, 16},
    {"tiny-llama", "mesh=2x1x4," F32 "prefill=wg-xy/heads,decode=wg-xy/heads", 8, 5, 16},
    {"tiny-llama", "mesh=1x4x2," F32 "prefill=wg-xy/heads,decode=wg-xy/heads", 8, 5, 16},
    /* chunked prefill: passes of sequences (prefill_chunk) and of tokens attending to the
     * KV cache already written (prefill_tokens) */
    {"tiny-llama", "mesh=2x1x1," F32 "prefill=ws1d/heads,decode=ws1d/heads,prefill_tokens=2", 4, 6, 8},
    {"tiny-llama", "mesh=2x2x2," F32 "prefill=ws2d/heads,decode=ws2d/batch,prefill_chunk=8", 16, 5, 8},
    {"tiny-llama", "mesh=1x2x4," F32 "prefill=ws2d/batch,decode=ws2d/batch,prefill_chunk=8,prefill_tokens=3", 16, 6, 8},
    {"tiny-palm", "mesh=2x2x1," F32 "prefill=wg-x/heads,decode=wg-x/heads,prefill_chunk=2,prefill_tokens=3", 4, 6, 8},
    {"tiny-palm", "stages=2,microbatches=2,mesh=1x2x1," F32 "prefill=ws2d/heads,decode=ws2d/heads,prefill_chunk=1,"
     "prefill_tokens=2", 4, 6, 8},
    {"tiny-gpt2", "mesh=2x2x2," F32 "prefill=wg-xyz/batch,decode=wg-xyz/batch,prefill_chunk=8,prefill_tokens=2", 16, 6, 8},
    {"tiny-gpt2", "replicas=2,mesh=2x1x1," F32 "prefill=ws2d/heads,decode=ws2d/heads,prefill_tokens=1", 4, 5, 8},
    /* chunked prefill with a KV handoff to decode's placement after every pass: all-gather, all-to-all
     * both ways, slice */
    {"tiny-llama", "mesh=2x2x2," F32 "prefill=wg-xyz/batch,decode=ws2d/heads,prefill_chunk=8", 16, 5, 3},
    {"tiny-gpt2", "mesh=2x2x2," F32 "prefill=ws2d/batch,decode=wg-xy/heads,prefill_chunk=8", 16, 5, 3},
    {"tiny-gpt2", "mesh=2x2x2," F32 "prefill=wg-x/heads,decode=ws2d/batch,prefill_chunk=8", 16, 5, 3},
    {"tiny-palm", "mesh=2x2x2," F32 "prefill=ws2d/heads,decode=wg-x/heads,prefill_chunk=8", 16, 5, 3},
    {"tiny-gpt2", "mesh=2x2x1," F32 "prefill=wg-xy/heads,decode=ws2d/batch,prefill_chunk=4", 8, 5, 8},
    /* fewer micro-batches than stages: the bubble, run as the lock-step schedule */
    {"tiny-llama", "stages=4,microbatches=1,mesh=2x1x1," F32 "prefill=ws1d/heads,decode=ws1d/heads", 1, 5, 8},
    {"tiny-llama", "stages=4,microbatches=2,mesh=1x1x1," F32 "prefill=ws2d/heads,decode=ws2d/heads", 4, 5, 8},
    {"tiny-palm", "stages=2,microbatches=1,mesh=1x2x1," F32 "prefill=ws2d/heads,decode=ws2d/heads", 3, 5, 8},
    {"tiny-gpt2", "stages=2,microbatches=1,replicas=2,mesh=2x1x1," F32 "prefill=wg-x/heads,decode=wg-x/heads", 4, 5, 8},
    /* quantised weights: the reference runs on the round-tripped weights;
     * gathers move storage bytes, per-column scales stay whole on every chip */
#define BF16 "weights=bf16,kv=f32,"
#define INT8 "weights=int8,kv=f32,"
#define FP8 "weights=fp8,kv=f32,"
    {"tiny-llama", "mesh=2x2x2," BF16 "prefill=ws1d/heads,decode=ws1d/heads", 8, 5, 16},
    {"tiny-llama", "mesh=2x2x2," BF16 "prefill=ws2d/heads,decode=ws2d/heads", 8, 5, 16},
    {"tiny-palm", "mesh=2x2x1," BF16 "prefill=wg-x/heads,decode=wg-x/heads", 4, 5, 16},
    {"tiny-gpt2", "mesh=2x2x2," BF16 "prefill=wg-xy/heads,decode=wg-xy/heads", 8, 5, 16},
    {"tiny-llama", "mesh=2x2x2," BF16 "prefill=wg-xyz/heads,decode=wg-xyz/heads", 8, 5, 16},
    {"tiny-llama", "mesh=2x2x2," BF16 "prefill=ws2d/heads,decode=ws2d/batch", 8, 5, 16},
    {"tiny-llama", "stages=2,microbatches=2,mesh=2x1x1," BF16 "prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 16},
    {"tiny-llama", "stages=2,microbatches=2,mesh=2x1x1," BF16 "prefill=wg-x/heads,decode=ws2d/batch,stage_layers=1,3", 4, 5, 16},
    {"tiny-llama", "mesh=2x2x2," INT8 "prefill=ws1d/heads,decode=ws1d/heads", 8, 5, 16},
    {"tiny-gpt2", "mesh=2x2x2," INT8 "prefill=ws2d/heads,decode=ws2d/heads", 8, 5, 16},
    {"tiny-palm", "mesh=2x2x1," INT8 "prefill=wg-x/heads,decode=wg-x/heads", 4, 5, 16},
    {"tiny-llama", "mesh=2x1x2," INT8 "prefill=wg-x/heads,decode=ws2d/batch", 4, 5, 16},
    {"tiny-palm", "mesh=2x2x2," INT8 "prefill=wg-xy/heads,decode=wg-xy/heads", 8, 5, 16},
    {"tiny-llama", "mesh=1x4x2," INT8 "prefill=wg-xy/heads,decode=wg-xy/heads", 8, 5, 16},
    {"tiny-gpt2", "mesh=2x2x2," INT8 "prefill=wg-xyz/batch,decode=wg-xyz/batch", 8, 5, 16},
    {"tiny-llama", "mesh=2x2x2," INT8 "prefill=wg-xyz/heads,decode=ws2d/batch", 8, 5, 16},
    {"tiny-llama", "mesh=2x2x2," INT8 "prefill=ws2d/heads,decode=ws2d/batch", 8, 5, 16},
    {"tiny-llama", "stages=2,microbatches=2,mesh=2x1x1," INT8 "prefill=wg-x/heads,decode=ws2d/batch", 4, 5, 16},
    {"tiny-gpt2", "stages=2,microbatches=2,mesh=1x2x1," INT8 "prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 16},
    {"tiny-llama", "mesh=2x2x2," FP8 "prefill=wg-xy/heads,decode=ws2d/batch", 8, 5, 16},
    {"tiny-palm", "mesh=2x1x2," FP8 "prefill=wg-xyz/heads,decode=wg-xyz/heads", 4, 5, 16},
    /* mixture of experts (tiny-moe: 8 experts, top-2): experts on one chip, expert-tensor parallelism
     * (each expert sharded over the tensor mesh), expert parallelism (experts split over the replicas,
     * all-to-all dispatch and combine), both, and replicas without it; capacity 4 = every token fits */
#define MOE "capacity=4,"
    {"tiny-moe", "mesh=1x1x1," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 2, 5, 16},
    {"tiny-moe", "mesh=2x1x1," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 2, 5, 16},
    {"tiny-moe", "mesh=2x2x1," MOE F32 "prefill=ws2d/heads,decode=ws2d/heads", 4, 5, 16},
    {"tiny-moe", "mesh=2x2x2," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 8, 5, 16},
    {"tiny-moe", "replicas=2,experts=2,mesh=1x1x1," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 16},
    {"tiny-moe", "replicas=4,experts=4,mesh=1x1x1," MOE F32 "prefill=ws2d/heads,decode=ws2d/heads", 4, 5, 16},
    {"tiny-moe", "replicas=8,experts=8,mesh=1x1x1," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 8, 5, 16},
    {"tiny-moe", "replicas=2,experts=2,mesh=2x1x1," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 16},
    {"tiny-moe", "replicas=2,experts=2,mesh=2x2x1," MOE F32 "prefill=ws2d/heads,decode=ws2d/batch", 8, 5, 16},
    {"tiny-moe", "replicas=4,experts=4,mesh=2x1x1," MOE F32 "prefill=ws2d/heads,decode=ws2d/heads", 8, 5, 16},
    {"tiny-moe", "replicas=2,mesh=2x1x1," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 16},
    {"tiny-moe", "stages=2,microbatches=2,replicas=2,experts=2,mesh=1x1x1," MOE F32
                 "prefill=ws1d/heads,decode=ws1d/heads", 8, 5, 16},
    {"tiny-moe", "replicas=2,experts=2,mesh=2x1x1," MOE BF16 "prefill=ws2d/heads,decode=ws2d/heads", 4, 5, 16},
    /* shared experts (tiny-moe-shared: one gated shared expert beside 8 routed, top-2 not renormalised):
     * on one chip, expert-tensor, expert, both (coordinated over 2 and over 2x2 tensor chips), with and
     * without expert parallelism over the replicas */
    {"tiny-moe-shared", "mesh=1x1x1," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 2, 5, 16},
    {"tiny-moe-shared", "mesh=2x2x1," MOE F32 "prefill=ws2d/heads,decode=ws2d/heads", 4, 5, 16},
    {"tiny-moe-shared", "replicas=2,experts=2,mesh=1x1x1," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 16},
    {"tiny-moe-shared", "replicas=2,experts=2,mesh=2x1x1," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 16},
    {"tiny-moe-shared", "replicas=2,experts=2,mesh=2x2x1," MOE F32 "prefill=ws2d/heads,decode=ws2d/batch", 8, 5, 16},
    {"tiny-moe-shared", "replicas=8,experts=8,mesh=1x1x1," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 8, 5, 16},
    {"tiny-moe-shared", "replicas=2,mesh=2x1x1," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 16},
    /* MoE every other layer (tiny-moe-every2: layers 1 and 3 MoE, 0 and 2 dense FFNs of their own width):
     * on one chip, expert-tensor, expert, both (coordinated), replicas without expert parallelism, and
     * pipelines whose stages start on a dense or on a MoE layer, or hold no MoE layer at all (1,3) */
    {"tiny-moe-every2", "mesh=1x1x1," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 2, 5, 16},
    {"tiny-moe-every2", "mesh=2x2x1," MOE F32 "prefill=ws2d/heads,decode=ws2d/heads", 4, 5, 16},
    {"tiny-moe-every2", "mesh=2x2x2," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 8, 5, 16},
    {"tiny-moe-every2", "replicas=2,experts=2,mesh=1x1x1," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 16},
    {"tiny-moe-every2", "replicas=8,experts=8,mesh=1x1x1," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 8, 5, 16},
    {"tiny-moe-every2", "replicas=2,experts=2,mesh=2x1x1," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 16},
    {"tiny-moe-every2", "replicas=2,experts=2,mesh=2x2x1," MOE F32 "prefill=ws2d/heads,decode=ws2d/batch", 8, 5, 16},
    {"tiny-moe-every2", "replicas=2,mesh=2x1x1," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 16},
    {"tiny-moe-every2", "stages=2,microbatches=2,replicas=2,experts=2,mesh=1x1x1," MOE F32
                        "prefill=ws1d/heads,decode=ws1d/heads", 8, 5, 16},
    {"tiny-moe-every2", "stages=2,microbatches=2,stage_layers=1,3,mesh=2x1x1," MOE F32
                        "prefill=ws2d/heads,decode=ws2d/heads", 4, 5, 16},
    {"tiny-moe-every2", "stages=2,microbatches=2,stage_layers=3,1,replicas=2,experts=2,mesh=1x1x1," MOE F32
                        "prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 16},
    {"tiny-moe-every2", "replicas=2,experts=2,mesh=2x1x1," MOE BF16 "prefill=ws2d/heads,decode=ws2d/heads", 4, 5, 16},
    /* int8/fp8 expert weights: each expert's own column scales (and the dense layers', the shared
     * experts'), the reference computing the same round-tripped weights */
    {"tiny-moe", "mesh=1x1x1," MOE INT8 "prefill=ws1d/heads,decode=ws1d/heads", 2, 5, 16},
    {"tiny-moe", "replicas=2,experts=2,mesh=2x1x1," MOE INT8 "prefill=ws2d/heads,decode=ws2d/heads", 4, 5, 16},
    {"tiny-moe", "replicas=4,experts=4,mesh=2x1x1," MOE FP8 "prefill=ws1d/heads,decode=ws1d/heads", 8, 5, 16},
    {"tiny-moe-shared", "replicas=2,experts=2,mesh=2x2x1," MOE INT8 "prefill=ws2d/heads,decode=ws2d/batch", 8, 5, 16},
    {"tiny-moe-every2", "stages=2,microbatches=2,stage_layers=1,3,replicas=2,experts=2,mesh=1x1x1," MOE FP8
                        "prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 16},
    {"tiny-moe-every2", "mesh=2x2x1," MOE INT8 "prefill=ws2d/heads,decode=ws2d/heads", 4, 5, 16},
    /* offload: some layers' weights and part of the KV cache in the host arena, copied in one
     * layer ahead (sp_lower.h, "Offload"), on 1, 2 and 4 chips; weight-gathered from streamed
     * shards, int8 scales and biases streamed, batch-sharded decode, a pipeline */
    {"tiny-llama", "mesh=1x1x1," F32 "offload_weights=2,offload_kv=0.5", 2, 5, 16},
    {"tiny-llama", "mesh=2x1x1," F32 "prefill=ws1d/heads,decode=ws1d/heads,offload_weights=4,offload_kv=1", 2, 5, 16},
    {"tiny-llama", "mesh=2x2x1," F32 "prefill=ws2d/heads,decode=ws2d/batch,offload_weights=1,offload_kv=0.5", 8, 5, 16},
    {"tiny-llama", "stages=2,microbatches=2,mesh=2x1x1," F32 "offload_weights=1,2,offload_kv=0.5", 8, 5, 16},
    {"tiny-gpt2", "mesh=1x1x1," F32 "offload_weights=1,offload_kv=0.5", 2, 5, 16},
    {"tiny-gpt2", "mesh=2x1x1," F32 "prefill=wg-x/heads,decode=ws2d/heads,offload_weights=2,offload_kv=0.5", 4, 5, 16},
    {"tiny-gpt2", "mesh=2x2x1,weights=int8,kv=f32,offload_weights=2,offload_kv=0.25", 4, 5, 16},
    {"tiny-gpt2", "stages=2,microbatches=2,mesh=1x2x1," F32 "offload_weights=1,1,offload_kv=1", 4, 5, 16},
    /* one part of a layer's weights streamed (offload_attn, offload_ffn): the attention's or the
     * FFN's alone, both with other counts, each stage its own, int8 scales and biases */
    {"tiny-llama", "mesh=1x1x1," F32 "offload_attn=3", 2, 5, 16},
    {"tiny-llama", "mesh=2x1x1," F32 "prefill=ws1d/heads,decode=ws1d/heads,offload_ffn=4,offload_kv=0.5", 2, 5, 16},
    {"tiny-llama", "mesh=2x2x1," F32 "prefill=ws2d/heads,decode=ws2d/batch,offload_attn=1,offload_ffn=3", 8, 5, 16},
    {"tiny-llama", "stages=2,microbatches=2,mesh=2x1x1," F32 "offload_attn=2,0,offload_ffn=0,1", 8, 5, 16},
    {"tiny-gpt2", "mesh=2x1x1," F32 "prefill=wg-x/heads,decode=ws2d/heads,offload_weights=1,offload_ffn=2", 4, 5, 16},
    {"tiny-gpt2", "mesh=2x2x1,weights=int8,kv=f32,offload_attn=2,offload_kv=0.25", 4, 5, 16},
    /* KV offload in a model whose layers differ (dense layers between MoE ones) */
    {"tiny-moe-every2", "replicas=2,experts=2,mesh=1x1x1," MOE F32 "prefill=ws1d/heads,decode=ws1d/heads,offload_kv=0.5",
                        4, 5, 16},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))


static void rand_tokens(int32_t *t, int64_t n, int64_t V, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++) t[i] = (int32_t)(sp_kern_rng_next(&seed) % (uint64_t)V);
}

/* runs case c (seeded by i) and checks it against the reference: logits,
 * tokens, bytes at every step, memory */
static void check_case(const exec_case *c, int _i)
{
    sp_model m;
    sp_error err;
    ck_assert_int_eq(sp_model_find(c->model, &m, &err), SP_OK);
    sp_layout l;
    ck_assert_msg(sp_layout_parse(c->layout, &l, &err) == SP_OK, "%s: %s", c->layout, err.text);
    sp_weights w;
    ck_assert_int_eq(sp_weights_build_random(&m, 1234 + (uint64_t)_i, &w), SP_OK);
    ck_assert_int_eq(sp_weights_quantize(&w, l.weights), SP_OK);
    ck_assert_int_eq(sp_weights_round_tables(&w, sp_lower_table_dtype(l.weights)), SP_OK);
    int64_t B = c->B, P = c->P, G = c->G, V = m.vocab;
    int32_t *prompt = malloc((size_t)(B * P) * sizeof *prompt);
    int32_t *rtok = malloc((size_t)(B * G) * sizeof *rtok), *etok = calloc((size_t)(B * G), sizeof *etok);
    int32_t *cur = malloc((size_t)B * sizeof *cur);
    float *rl = malloc((size_t)(B * V) * sizeof *rl), *el = calloc((size_t)(B * V), sizeof *el);
    rand_tokens(prompt, B * P, V, 99 + (uint64_t)_i);

    /* reference: prefill, then feed each greedy token back */
    sp_ref *r;
    ck_assert_int_eq(sp_ref_build(&m, &w, B, P + G, &r), SP_OK);
    ck_assert_int_eq(sp_ref_forward(r, prompt, P, rl, SP_REF_LAST), SP_OK);
    for (int64_t g = 0; g < G; g++) {
        if (g > 0) ck_assert_int_eq(sp_ref_forward(r, cur, 1, rl, SP_REF_LAST), SP_OK);
        for (int64_t b = 0; b < B; b++) cur[b] = rtok[b * G + g] = sp_kern_argmax(rl + b * V, V);
    }
    sp_ref_free(r);

    sp_exec *ex;
    ck_assert_msg(sp_exec_build(&m, &l, B, P, G, &w, SP_COMM_BACKEND_THREADS, &ex) == SP_OK, "%s %s: %s", c->model,
                  c->layout, sp_last_error());
    sp_exec_stats st;
    sp_status s = sp_exec_run(ex, prompt, NULL, etok, el, &st);
    ck_assert_msg(s == SP_OK, "%s %s: %s", c->model, c->layout, sp_last_error());

    double md = 0, mx = 1e-30;
    for (int64_t i = 0; i < B * V; i++) {
        ck_assert_msg(isfinite(el[i]), "non-finite logit");
        md = fmax(md, fabs((double)el[i] - rl[i]));
        mx = fmax(mx, fabs((double)rl[i]));
    }
    ck_assert_msg(md / mx <= 1e-4, "%s %s: last logits rel diff %g", c->model, c->layout, md / mx);
    for (int64_t i = 0; i < B * G; i++)
        ck_assert_msg(etok[i] == rtok[i], "%s %s: token %lld (seq %lld step %lld): %d vs reference %d", c->model,
                      c->layout, (long long)i, (long long)(i / G), (long long)(i % G), etok[i], rtok[i]);
    ck_assert_msg(st.mismatches == 0, "%s %s: %lld byte mismatches, first: %s", c->model, c->layout,
                  (long long)st.mismatches, st.first_mismatch);
    for (int k = 0; k < SP_COLL_COUNT; k++) {
        ck_assert_msg(st.measured_bytes[k] == st.predicted_bytes[k], "%s: sent %llu vs %llu", sp_coll_kind_name(k),
                      (unsigned long long)st.measured_bytes[k], (unsigned long long)st.predicted_bytes[k]);
        ck_assert_msg(st.measured_recv[k] == st.predicted_recv[k], "%s: recv", sp_coll_kind_name(k));
    }
    /* memory: every chip's arena is the lowering's prediction for its stage, exactly (separate
     * groups: each group's phase alone, the prefill group's cache holding the prompt); so is the
     * host arena of what it offloads */
    int64_t pred = 0, host_pred = 0;
    static sp_program pp, dp;
    int groups = sp_layout_disaggregated(&l);
    for (int gi = 0; gi < (groups ? 2 : 1); gi++) {
        sp_layout gl;
        sp_layout_phase_group(&l, (sp_phase)gi, &gl);
        int64_t ctx = groups && gi == 0 ? P : P + G;
        for (int stg = 0; stg < gl.stages; stg++) {
            sp_shape psh = {B, P, P, ctx, SP_DT_F32, 0}, dsh = {B, 1, P + G, P + G, SP_DT_F32, 0};
            if (!groups || gi == 0) ck_assert_int_eq(sp_lower(&m, &gl, SP_PHASE_PREFILL, &psh, stg, &pp), SP_OK);
            if (!groups || gi == 1) ck_assert_int_eq(sp_lower(&m, &gl, SP_PHASE_DECODE, &dsh, stg, &dp), SP_OK);
            sp_mem_sizes ms;
            ck_assert_int_eq(sp_lower_mem_sizes(groups && gi == 1 ? &dp : &pp, groups && gi == 0 ? &pp : &dp, &ms),
                             SP_OK);
            ck_assert_int_gt(ms.scratch, 0);
            if (ms.total > pred) pred = ms.total;
            if (ms.host_total > host_pred) host_pred = ms.host_total;
        }
    }
    ck_assert_msg(st.host_allocated_bytes_per_chip == host_pred && st.host_predicted_bytes_per_chip == host_pred,
                  "%s %s: host arena %lld, reported predicted %lld, sp_lower_mem_sizes %lld", c->model, c->layout,
                  (long long)st.host_allocated_bytes_per_chip, (long long)st.host_predicted_bytes_per_chip,
                  (long long)host_pred);
    ck_assert_msg(st.host_link_bytes_measured == st.host_link_bytes_predicted, "%s %s: host link %llu moved, %llu predicted",
                  c->model, c->layout, (unsigned long long)st.host_link_bytes_measured,
                  (unsigned long long)st.host_link_bytes_predicted);
    ck_assert_msg(sp_layout_offloads(&l) == (host_pred > 0 && st.host_link_bytes_measured > 0),
                  "%s %s: offload %d, host arena %lld, host link %llu", c->model, c->layout, sp_layout_offloads(&l),
                  (long long)host_pred, (unsigned long long)st.host_link_bytes_measured);
    ck_assert_msg(st.allocated_bytes_per_chip == pred && st.predicted_bytes_per_chip == pred,
                  "%s %s: allocated %lld, reported predicted %lld, sp_lower_mem_sizes %lld", c->model, c->layout,
                  (long long)st.allocated_bytes_per_chip, (long long)st.predicted_bytes_per_chip, (long long)pred);
    if (sp_layout_chips(&l) / l.stages / l.replicas > 1) ck_assert_msg(st.comm_steps > 0, "no collective ran");
    if (l.stages > 1 && !groups) ck_assert_msg(st.token_bytes > 0, "pipeline token hand-off not counted");
    if (groups) {
        /* the KV transfer moved what the cost model prices (closed form: check_groups), and
         * without pipelines it is every send-recv byte of the run */
        sp_hw hw;
        ck_assert_int_eq(sp_hw_find("a100-80g", &hw, &err), SP_OK);
        sp_kv_xfer_cost x;
        ck_assert_int_eq(sp_cost_kv_xfer(&m, &hw, &l, B, P, SP_XFER_ONE_JOB, &x), SP_OK);
        ck_assert_int_ge(st.measured_bytes[SP_COLL_SENDRECV], x.bytes);
        ck_assert_int_ge(st.measured_recv[SP_COLL_SENDRECV], x.bytes);
        if (l.group[0].stages == 1 && l.group[1].stages == 1)
            ck_assert_msg(st.measured_bytes[SP_COLL_SENDRECV] == (uint64_t)x.bytes &&
                              st.measured_recv[SP_COLL_SENDRECV] == (uint64_t)x.bytes,
                          "%s %s: send-recv %llu bytes, the KV transfer is priced at %lld", c->model, c->layout,
                          (unsigned long long)st.measured_bytes[SP_COLL_SENDRECV], (long long)x.bytes);
    }
    /* expert parallelism moves tokens to their experts' replicas (and the bytes matched above) */
    if (l.experts > 1) ck_assert_msg(st.measured_bytes[SP_COLL_ALLTOALL] > 0, "no dispatch all-to-all ran");
    /* the expected-value figures differ from the prediction only where the routing decides: the
     * expert all-to-all (predicted from the actual routing above, expected from the router's law) */
    for (int k = 0; k < SP_COLL_COUNT; k++)
        if (k != SP_COLL_ALLTOALL || l.experts == 1)
            ck_assert_msg(st.expected_bytes[k] == st.predicted_bytes[k] && st.expected_recv[k] == st.predicted_recv[k],
                          "%s: expected %llu, predicted %llu", sp_coll_kind_name(k),
                          (unsigned long long)st.expected_bytes[k], (unsigned long long)st.predicted_bytes[k]);
    if (l.experts > 1) ck_assert_msg(st.expected_bytes[SP_COLL_ALLTOALL] > 0, "no expected all-to-all bytes");
    sp_exec_free(ex);
    sp_weights_free(&w);
    free(prompt);
    free(rtok);
    free(etok);
    free(cur);
    free(rl);
    free(el);
}

START_TEST(test_layout_matches_reference)
{
    check_case(&cases[_i], _i);
}
END_TEST

/* Every pair of prefill and decode layouts that shares weight storage (2D:
 * 4 FFN × 2 attention layouts each side; 1D: 2 × 2) on 8 chips, for models
 * whose KV heads are sharded like Q (tiny-gpt2: 16 KV heads), replicated
 * (tiny-llama: 4) and multi-query (tiny-palm: 1): the KV handoff between
 * the phases moves K/V to decode's placement, bytes as predicted. */
static const char *const handoff_models[] = {"tiny-gpt2", "tiny-llama", "tiny-palm"};
#define N_PAIRS (4 * 4 * 2 * 2 + 2 * 2)
START_TEST(test_handoff_matches_reference)
{
    static const char *const ffn[] = {"ws2d", "wg-x", "wg-xy", "wg-xyz", "ws1d"};
    static const char *const attn[] = {"heads", "batch"};
    int pair = _i % N_PAIRS, pf, df, pa, da;
    if (pair < 64) {
        pf = pair / 16, df = pair / 4 % 4, pa = pair / 2 % 2, da = pair % 2;
    } else {
        pf = df = 4, pa = (pair - 64) / 2, da = (pair - 64) % 2;
    }
    char layout[160];
    snprintf(layout, sizeof layout, "mesh=2x2x2," F32 "prefill=%s/%s,decode=%s/%s", ffn[pf], attn[pa], ffn[df],
             attn[da]);
    exec_case c = {handoff_models[_i / N_PAIRS], layout, 8, 5, 3};
    check_case(&c, 500 + _i);
}
END_TEST

/* Separate prefill and decode chip groups (4+2, 2+4, 4+4 chips, a 2-stage
 * prefill group feeding a 1-stage decode group, a chunked prefill group,
 * equal groups kept apart by groups=separate) on
 * tiny-llama (GQA), tiny-palm (MQA) and tiny-gpt2 (MHA): the decode group's
 * cache arrives by the KV transfer, tokens equal the single-chip reference. */
static const char *const group_layouts[] = {
    "prefill.mesh=4x1x1,decode.mesh=2x1x1",
    "prefill.mesh=2x1x1,decode.mesh=4x1x1,decode=ws2d/batch",
    "prefill.mesh=2x2x1,decode.mesh=4x1x1,prefill=wg-xyz/batch,decode=ws1d/heads",   /* own storage each */
    "prefill.mesh=2x1x1,prefill.stages=2,decode.mesh=2x1x1",
    "prefill.mesh=1x1x1,prefill.replicas=2,decode.mesh=2x1x1,decode.stages=2,microbatches=2,prefill_chunk=1",
    "mesh=2x2x1,groups=separate,decode=ws2d/batch",                       /* 4 + 4 chips, one mesh */
    "stages=2,microbatches=2,mesh=2x1x1,groups=separate",                  /* 4 + 4, 2-stage groups */
};
#define N_GROUP_LAYOUTS ((int)(sizeof group_layouts / sizeof group_layouts[0]))
START_TEST(test_groups_match_reference)
{
    char layout[200];
    snprintf(layout, sizeof layout, F32 "%s", group_layouts[_i % N_GROUP_LAYOUTS]);
    exec_case c = {handoff_models[_i / N_GROUP_LAYOUTS], layout, 8, 5, 3};
    check_case(&c, 900 + _i);
}
END_TEST

/* tiny-llama, a layout and random weights */
static void tiny_job(const char *layout, uint64_t seed, sp_model *m, sp_layout *l, sp_weights *w)
{
    sp_error err;
    ck_assert_int_eq(sp_model_find("tiny-llama", m, &err), SP_OK);
    ck_assert_msg(sp_layout_parse(layout, l, &err) == SP_OK, "%s: %s", layout, err.text);
    ck_assert_int_eq(sp_weights_build_random(m, seed, w), SP_OK);
}

/* Stages of their own meshes (stage_mesh): each stage's collectives over its
 * own mesh, the activations handed from one stage's blocks to the next's
 * (sp_lower_stage_xfer) on tiny-llama (GQA), tiny-palm (MQA, 2 layers) and
 * tiny-gpt2 (MHA, 2 layers): smaller and larger second stages, uneven
 * splits, replicas, batch-sharded activations (rows move between chips),
 * column-sharded ones of other widths (a row at a time), three stages,
 * chunked prefill passes, stored weights of other dtypes. */
static const exec_case hetero_cases[] = {
    {"tiny-llama", "stages=2,microbatches=2,stage_mesh=2x1x1,1x1x1," F32 "prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 8},
    {"tiny-llama", "stages=2,microbatches=2,stage_mesh=2x1x1,4x1x1," F32 "prefill=ws2d/heads,decode=ws2d/heads", 4, 5, 8},
    {"tiny-llama", "stages=2,microbatches=2,stage_mesh=4x1x1,1x2x1,stage_layers=3,1," F32
                   "prefill=ws2d/heads,decode=ws2d/batch", 8, 5, 8},
    {"tiny-palm", "stages=2,microbatches=2,stage_mesh=1x2x1,2x2x1," F32 "prefill=ws2d/heads,decode=ws2d/heads", 4, 5, 8},
    {"tiny-gpt2", "stages=2,microbatches=2,replicas=2,stage_mesh=2x1x1,1x1x1," F32
                  "prefill=wg-x/heads,decode=wg-x/heads", 8, 5, 8},
    {"tiny-gpt2", "stages=2,microbatches=1,stage_mesh=2x2x1,2x1x1," F32 "prefill=wg-xyz/batch,decode=wg-xyz/batch", 4, 5, 8},
    {"tiny-llama", "stages=3,microbatches=2,stage_mesh=1x1x1,2x1x1,2x2x1,stage_layers=1,2,1," F32
                   "prefill=ws2d/heads,decode=ws2d/heads", 4, 5, 8},
    {"tiny-llama", "stages=2,microbatches=2,stage_mesh=2x1x1,2x2x1," F32
                   "prefill=ws2d/heads,decode=ws2d/heads,prefill_chunk=1,prefill_tokens=2", 4, 6, 6},
    {"tiny-llama", "stages=2,microbatches=2,replicas=2,stage_mesh=1x2x1,2x1x1," BF16
                   "prefill=wg-x/heads,decode=ws2d/batch", 8, 5, 8},
    {"tiny-palm", "stages=2,microbatches=2,stage_mesh=2x1x1,1x1x1," INT8 "prefill=ws1d/heads,decode=ws1d/heads", 4, 5, 8},
};
#define N_HETERO ((int)(sizeof hetero_cases / sizeof hetero_cases[0]))

/* Bytes of the stage hand-offs of a run (sp_lower_stage_xfer, summed over its blocks): every
 * boundary, micro-batch and prefill pass, and every decode step after the first token. */
static sp_status add_block(void *ctx, const sp_stage_block *b)
{
    *(int64_t *)ctx += b->bytes;
    return SP_OK;
}

static int64_t handoff_bytes(const sp_model *m, const sp_layout *l, int64_t B, int64_t P, int64_t G)
{
    static sp_program p;
    sp_shape psh = {B, P, P, P + G, SP_DT_F32, 0}, dsh = {B, 1, P + G, P + G, SP_DT_F32, 0};
    ck_assert_int_eq(sp_lower(m, l, SP_PHASE_PREFILL, &psh, 0, &p), SP_OK);
    int64_t passes = p.passes_seq * p.passes_tok, total = 0;
    for (int b = 0; b + 1 < l->stages; b++) {
        int64_t pf = 0, dc = 0;
        ck_assert_int_eq(sp_lower_stage_xfer(m, l, SP_PHASE_PREFILL, &psh, b, add_block, &pf), SP_OK);
        ck_assert_int_eq(sp_lower_stage_xfer(m, l, SP_PHASE_DECODE, &dsh, b, add_block, &dc), SP_OK);
        ck_assert_int_gt(pf, 0);
        ck_assert_int_gt(dc, 0);
        total += l->microbatches * (passes * pf + (G - 1) * dc);
    }
    return total;
}

START_TEST(test_stage_mesh_matches_reference)
{
    const exec_case *c = &hetero_cases[_i];
    check_case(c, 700 + _i);
    /* the bytes every SEND and RECV step moved are the lowering's blocks, as the cost model prices them */
    sp_model m;
    sp_layout l;
    sp_error err;
    ck_assert_int_eq(sp_model_find(c->model, &m, &err), SP_OK);
    ck_assert_int_eq(sp_layout_parse(c->layout, &l, &err), SP_OK);
    ck_assert(sp_layout_hetero(&l));
    sp_weights w;
    ck_assert_int_eq(sp_weights_build_random(&m, 3, &w), SP_OK);
    ck_assert_int_eq(sp_weights_quantize(&w, l.weights), SP_OK);
    int32_t *prompt = calloc((size_t)(c->B * c->P), sizeof *prompt), *tok = calloc((size_t)(c->B * c->G), sizeof *tok);
    sp_exec *ex;
    ck_assert_int_eq(sp_exec_build(&m, &l, c->B, c->P, c->G, &w, SP_COMM_BACKEND_THREADS, &ex), SP_OK);
    sp_exec_stats st;
    ck_assert_msg(sp_exec_run(ex, prompt, NULL, tok, NULL, &st) == SP_OK, "%s", sp_last_error());
    int64_t want = handoff_bytes(&m, &l, c->B, c->P, c->G);
    ck_assert_msg(st.measured_bytes[SP_COLL_SENDRECV] == (uint64_t)want && st.measured_recv[SP_COLL_SENDRECV] == (uint64_t)want,
                  "%s %s: hand-off sent %llu, received %llu, the blocks hold %lld", c->model, c->layout,
                  (unsigned long long)st.measured_bytes[SP_COLL_SENDRECV],
                  (unsigned long long)st.measured_recv[SP_COLL_SENDRECV], (long long)want);
    sp_exec_free(ex);
    sp_weights_free(&w);
    free(prompt);
    free(tok);
}
END_TEST

/* A hand-off that loses what it received (fault 1), or moves nothing (fault 2), is
 * caught: logits off the reference, or bytes short of the prediction. */
START_TEST(test_stage_mesh_handoff_fault_caught)
{
    sp_model m;
    sp_layout l;
    sp_weights w;
    tiny_job("stages=2,microbatches=2,stage_mesh=2x1x1,1x1x1," F32 "prefill=ws2d/heads,decode=ws2d/heads", 11, &m, &l, &w);
    int64_t B = 2, P = 4, G = 2, V = m.vocab;
    int32_t prompt[8], tok[4];
    rand_tokens(prompt, B * P, V, 13);
    float *rl = malloc((size_t)(B * V) * sizeof *rl), *el = malloc((size_t)(B * V) * sizeof *el);
    sp_ref *r;
    ck_assert_int_eq(sp_ref_build(&m, &w, B, P + G, &r), SP_OK);
    ck_assert_int_eq(sp_ref_forward(r, prompt, P, rl, SP_REF_LAST), SP_OK);
    sp_ref_free(r);
    for (int fault = 0; fault <= 2; fault++) {
        sp_exec *ex;
        ck_assert_int_eq(sp_exec_build(&m, &l, B, P, 1, &w, SP_COMM_BACKEND_THREADS, &ex), SP_OK);
        sp_exec_stats st;
        spi_exec_handoff_fault = fault;
        sp_status s = sp_exec_run(ex, prompt, NULL, tok, el, &st);
        spi_exec_handoff_fault = 0;
        ck_assert_msg(s == SP_OK, "%s", sp_last_error());
        double md = 0, mx = 1e-30;
        for (int64_t i = 0; i < B * V; i++) {
            md = fmax(md, fabs((double)el[i] - rl[i]));
            mx = fmax(mx, fabs((double)rl[i]));
        }
        if (fault == 0) ck_assert_msg(md / mx <= 1e-4 && st.mismatches == 0, "clean run: %g, %lld", md / mx,
                                      (long long)st.mismatches);
        if (fault == 1) ck_assert_msg(md / mx > 1e-2 && st.mismatches == 0, "lost hand-off: %g", md / mx);
        if (fault == 2) {
            ck_assert_int_gt(st.mismatches, 0);
            ck_assert_msg(strstr(st.first_mismatch, "send-recv"), "%s", st.first_mismatch);
            ck_assert_int_eq(st.measured_bytes[SP_COLL_SENDRECV], 0);
            ck_assert_int_gt(st.predicted_bytes[SP_COLL_SENDRECV], 0);
        }
        sp_exec_free(ex);
    }
    /* what the executor does not run with stage meshes is refused by name */
    sp_exec *ex = NULL;
    ck_assert_int_eq(sp_exec_build(&m, &l, B, P, G, &w, SP_COMM_BACKEND_NCCL, &ex), SP_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(sp_last_error(), "stage_mesh: stages of their own mesh on the CUDA executor"));
    sp_ragged rg;
    int64_t pl[2] = {3, 4}, gl[2] = {2, 1};
    ck_assert_int_eq(sp_ragged_from(pl, gl, 2, &rg), SP_OK);
    ck_assert_int_eq(sp_exec_build_ragged(&m, &l, &rg, &w, SP_COMM_BACKEND_THREADS, &ex), SP_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(sp_last_error(), "stage_mesh: running a ragged batch"));
    ck_assert_ptr_null(ex);
    sp_ragged_free(&rg);
    free(rl);
    free(el);
    sp_weights_free(&w);
}
END_TEST

/* MoE: an expert chosen by more tokens than its capacity slots is refused by
 * name (tokens are never dropped silently); the same job with room runs. */
START_TEST(test_moe_capacity_refused)
{
    sp_model m;
    sp_error err;
    ck_assert_int_eq(sp_model_find("tiny-moe", &m, &err), SP_OK);
    sp_weights w;
    ck_assert_int_eq(sp_weights_build_random(&m, 7, &w), SP_OK);
    int64_t B = 4, P = 8, G = 2;
    int32_t prompt[32], tok[8];
    float logits[4 * 256];
    rand_tokens(prompt, B * P, m.vocab, 5);
    /* capacity 1: S = ceil(32 · 2 / 8) = 8 slots per expert for 64 choices: some expert overflows
     * unless the router is perfectly balanced */
    const char *lay[2] = {"mesh=1x1x1,weights=f32,kv=f32", "mesh=1x1x1,weights=f32,kv=f32,capacity=4"};
    for (int i = 0; i < 2; i++) {
        sp_layout l;
        ck_assert_int_eq(sp_layout_parse(lay[i], &l, &err), SP_OK);
        sp_exec *ex;
        ck_assert_int_eq(sp_exec_build(&m, &l, B, P, G, &w, SP_COMM_BACKEND_THREADS, &ex), SP_OK);
        sp_exec_stats st;
        sp_status s = sp_exec_run(ex, prompt, NULL, tok, logits, &st);
        if (i == 0) {
            ck_assert_int_eq(s, SP_EINFEASIBLE);
            ck_assert_msg(strstr(sp_last_error(), "capacity") != NULL, "%s", sp_last_error());
        } else {
            ck_assert_msg(s == SP_OK, "%s", sp_last_error());
        }
        sp_exec_free(ex);
    }
    /* the executor keeps MoE on the CPU: the CUDA device is refused by name, before any device is touched */
    sp_layout l;
    ck_assert_int_eq(sp_layout_parse("mesh=1x1x1,capacity=4,weights=f32,kv=f32", &l, &err), SP_OK);
    sp_exec *ex = NULL;
    ck_assert_int_eq(sp_exec_build(&m, &l, B, P, G, &w, SP_COMM_BACKEND_NCCL, &ex), SP_EINVAL);
    ck_assert_ptr_nonnull(strstr(sp_last_error(), "mixture-of-experts layers on the CUDA device are not implemented"));
    sp_weights_free(&w);
}
END_TEST

/* A layout that does not fit the model is rejected with a reason. */
START_TEST(test_bad_layout_rejected)
{
    sp_model m;
    sp_layout l;
    sp_weights w;
    tiny_job("mesh=3x1x1," F32 "prefill=ws1d/heads,decode=ws1d/heads", 1, &m, &l, &w);
    sp_exec *ex = NULL;
    ck_assert_int_eq(sp_exec_build(&m, &l, 3, 4, 2, &w, SP_COMM_BACKEND_THREADS, &ex), SP_EINVAL);
    ck_assert_ptr_null(ex);
    ck_assert(strlen(sp_last_error()) > 0);
    sp_weights_free(&w);
}
END_TEST

/* An arena one block short of the prediction fails the run naming the block
 * that did not fit; one with bytes to spare counts a mismatch. */
START_TEST(test_arena_size_checked)
{
    sp_model m;
    sp_layout l;
    sp_weights w;
    tiny_job("mesh=2x1x1," INT8 "prefill=wg-x/heads,decode=ws2d/batch", 7, &m, &l, &w);
    int64_t B = 2, P = 4, G = 3;
    int32_t prompt[8] = {1, 2, 3, 4, 5, 6, 7, 8}, tok[6];
    sp_exec *ex;
    ck_assert_int_eq(sp_exec_build(&m, &l, B, P, G, &w, SP_COMM_BACKEND_THREADS, &ex), SP_OK);
    sp_exec_stats st;
    spi_exec_arena_delta = -SP_MEM_ALIGN;
    sp_status s = sp_exec_run(ex, prompt, NULL, tok, NULL, &st);
    spi_exec_arena_delta = 0;
    ck_assert_int_eq(s, SP_EINTERNAL);
    ck_assert_msg(strstr(sp_last_error(), "does not fit its arena"), "message: %s", sp_last_error());
    sp_exec_free(ex);
    ck_assert_int_eq(sp_exec_build(&m, &l, B, P, G, &w, SP_COMM_BACKEND_THREADS, &ex), SP_OK);
    spi_exec_arena_delta = SP_MEM_ALIGN;
    s = sp_exec_run(ex, prompt, NULL, tok, NULL, &st);
    spi_exec_arena_delta = 0;
    ck_assert_int_eq(s, SP_OK);
    ck_assert_int_eq(st.mismatches, 2);   /* both chips */
    ck_assert_msg(strstr(st.first_mismatch, "memory"), "mismatch: %s", st.first_mismatch);
    ck_assert_int_eq(st.allocated_bytes_per_chip, st.predicted_bytes_per_chip + SP_MEM_ALIGN);
    sp_exec_free(ex);
    /* and the right size runs clean */
    ck_assert_int_eq(sp_exec_build(&m, &l, B, P, G, &w, SP_COMM_BACKEND_THREADS, &ex), SP_OK);
    ck_assert_int_eq(sp_exec_run(ex, prompt, NULL, tok, NULL, &st), SP_OK);
    ck_assert_int_eq(st.mismatches, 0);
    ck_assert_int_eq(st.allocated_bytes_per_chip, st.predicted_bytes_per_chip);
    sp_exec_free(ex);
    sp_weights_free(&w);
}
END_TEST

/* The measured timeline: valid JSON, and every step of every chip's programs
 * appears exactly once per (chip, step id, micro-batch), on the stream and
 * under the label sp_trace.h gives it; the per-class times are those of the
 * steps (each chip's step times fit in the run's wall time). */
static const struct { const char *model, *layout; int64_t B, P, G; } trace_cases[] = {
    {"tiny-llama", "mesh=2x1x1," INT8 "prefill=wg-x/heads,decode=ws2d/batch", 4, 5, 4},
    {"tiny-gpt2", "replicas=2,mesh=2x1x1," F32 "prefill=ws1d/heads,decode=ws1d/heads", 4, 3, 3},
    {"tiny-palm", "stages=2,microbatches=2,mesh=1x2x1," BF16 "prefill=ws2d/heads,decode=ws2d/heads", 4, 4, 3},
    {"tiny-moe-every2", "stages=2,microbatches=2,stage_layers=1,3,replicas=2,experts=2,mesh=1x1x1," MOE F32
                        "prefill=ws1d/heads,decode=ws1d/heads", 4, 4, 3},
    {"tiny-llama", "stages=2,microbatches=2,replicas=2,stage_mesh=2x1x1,1x1x1," F32 "prefill=ws2d/heads,decode=ws2d/heads",
                   4, 4, 3},
};

START_TEST(test_trace_every_step_once)
{
    sp_model m;
    sp_error err;
    ck_assert_int_eq(sp_model_find(trace_cases[_i].model, &m, &err), SP_OK);
    sp_layout l;
    ck_assert_int_eq(sp_layout_parse(trace_cases[_i].layout, &l, &err), SP_OK);
    sp_weights w;
    ck_assert_int_eq(sp_weights_build_random(&m, 11, &w), SP_OK);
    int64_t B = trace_cases[_i].B, P = trace_cases[_i].P, G = trace_cases[_i].G;
    int32_t prompt[64], tok[64];
    for (int i = 0; i < 64; i++) prompt[i] = (int32_t)(i * 7 % m.vocab);
    char path[] = "/tmp/check_exec_trace_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    sp_exec *ex;
    ck_assert_int_eq(sp_exec_build(&m, &l, B, P, G, &w, SP_COMM_BACKEND_THREADS, &ex), SP_OK);
    ck_assert_int_eq(sp_exec_set_trace(ex, path), SP_OK);
    sp_exec_stats st;
    ck_assert_msg(sp_exec_run(ex, prompt, NULL, tok, NULL, &st) == SP_OK, "%s", sp_last_error());
    sp_exec_free(ex);

    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    ck_assert_msg(root, "%s: %s at %d:%d", path, je.text, je.line, je.column);
    unlink(path);
    json_t *evs = json_object_get(root, "traceEvents");
    ck_assert(json_is_array(evs));
    /* expected: each chip (numbered stage-major, each stage's chips after the earlier
     * stages', as sp_layout.h says) runs, per run step and micro-batch, its stage's pre,
     * n_layers × layer, post */
    int n = (int)sp_layout_chips(&l);
    int64_t total = 0;
    static sp_program pp, dp;
    for (int r = 0; r < n; r++) {
        int stage = 0;
        while (stage + 1 < l.stages && r >= sp_layout_stage_first_chip(&l, stage + 1)) stage++;
        sp_shape psh = {B, P, P, P + G, SP_DT_F32, 0}, dsh = {B, 1, P + G, P + G, SP_DT_F32, 0};
        ck_assert_int_eq(sp_lower(&m, &l, SP_PHASE_PREFILL, &psh, stage, &pp), SP_OK);
        ck_assert_int_eq(sp_lower(&m, &l, SP_PHASE_DECODE, &dsh, stage, &dp), SP_OK);
        for (int64_t s = 0; s < G; s++) {
            const sp_program *p = s == 0 ? &pp : &dp;
            for (int mb = 0; mb < l.microbatches; mb++)
                /* pre (u = -1), each layer's part (MoE or dense) in order, post (u = n_layers) */
                for (int64_t u = -1; u <= p->n_layers; u++) {
                    sp_prog_part part = u < 0 ? SP_PART_PRE : u == p->n_layers ? SP_PART_POST : sp_program_layer_part(p, u);
                    const sp_steps *ss = sp_program_part(p, part);
                    int64_t li = u;
                        for (int i = 0; i < ss->n; i++) {
                            char id[SP_TRACE_ID_MAX], name[SP_TRACE_LABEL_MAX];
                            sp_trace_step_id(p->phase, s - 1, (sp_prog_part)part, li, i, id, sizeof id);
                            sp_trace_step_label(&ss->s[i], name, sizeof name);
                            int found = 0;
                            size_t k;
                            json_t *e;
                            json_array_foreach(evs, k, e) {
                                if (strcmp(json_string_value(json_object_get(e, "ph")), "X")) continue;
                                json_t *a = json_object_get(e, "args");
                                if (json_integer_value(json_object_get(e, "pid")) != r ||
                                    json_integer_value(json_object_get(a, "mb")) != mb ||
                                    strcmp(json_string_value(json_object_get(a, "id")), id))
                                    continue;
                                found++;
                                ck_assert_str_eq(json_string_value(json_object_get(e, "name")), name);
                                ck_assert_int_eq(json_integer_value(json_object_get(e, "tid")),
                                                 sp_trace_step_stream(&ss->s[i]));
                                ck_assert(json_number_value(json_object_get(e, "dur")) >= 0);
                            }
                            ck_assert_msg(found == 1, "chip %d %s mb %d: %d events", r, id, mb, found);
                            total++;
                        }
                }
        }
    }
    int64_t complete = 0;
    size_t k;
    json_t *e;
    json_array_foreach(evs, k, e) complete += !strcmp(json_string_value(json_object_get(e, "ph")), "X");
    ck_assert_int_eq(complete, total);   /* and nothing else */
    json_decref(root);

    double pf = 0, dc = 0;
    for (int c = 0; c < SP_CLASS_COUNT; c++) {
        ck_assert(st.measured_prefill_class_s[c] >= 0 && st.measured_decode_class_s[c] >= 0);
        pf += st.measured_prefill_class_s[c];
        dc += st.measured_decode_class_s[c];
    }
    ck_assert(pf > 0 && dc > 0 && st.measured_prefill_class_s[SP_CLASS_MATMUL] > 0);
    if (l.stages == 1) ck_assert_msg(pf <= st.prefill_s && dc <= st.decode_step_s, "classes %g %g vs wall %g %g", pf,
                                     dc, st.prefill_s, st.decode_step_s);
    sp_weights_free(&w);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec");
    TCase *tc = tcase_create("layouts");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_layout_matches_reference, 0, N_CASES);
    tcase_add_loop_test(tc, test_handoff_matches_reference, 0, 3 * N_PAIRS);
    tcase_add_test(tc, test_bad_layout_rejected);
    tcase_add_test(tc, test_moe_capacity_refused);
    tcase_add_test(tc, test_arena_size_checked);
    tcase_add_loop_test(tc, test_trace_every_step_once, 0, (int)(sizeof trace_cases / sizeof trace_cases[0]));
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("groups");
    tcase_set_timeout(tg, 120);
    tcase_add_loop_test(tg, test_groups_match_reference, 0, 3 * N_GROUP_LAYOUTS);
    suite_add_tcase(s, tg);
    TCase *th = tcase_create("stage_mesh");
    tcase_set_timeout(th, 120);
    tcase_add_loop_test(th, test_stage_mesh_matches_reference, 0, N_HETERO);
    tcase_add_test(th, test_stage_mesh_handoff_fault_caught);
    suite_add_tcase(s, th);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
