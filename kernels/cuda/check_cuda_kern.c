/* check_cuda_kern.c: every CUDA kernel of sp_cuda.h against its CPU kernel
 * of kernels/cpu/sp_kern.h on random data (fixed seed), by normalised mean
 * squared error NMSE = sum (gpu - cpu)^2 / sum cpu^2 with a threshold per op
 * (fp32 on both sides: only the summation order differs; cuBLAS may use
 * TF32 only if the environment forces it, NVIDIA_TF32_OVERRIDE=1, which
 * this check reports as a failure of the matmul threshold).  Stored dtypes
 * (BF16/F16/INT8/FP8 weights, BF16/F16 tables, BF16 KV cache) are decoded
 * by the same conversions on both sides (kernels/spi_conv.h), so the same
 * thresholds hold; embedding rows and the bf16 KV cache written by append
 * must be bit-identical.  Index results (embed, argmax) must match exactly.  Exits 77 (skip) with the reason when
 * no GPU is visible, 1 on any failure, 0 otherwise. */
#include "config.h"
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/sp_kern.h"
#include "kernels/cuda/sp_cuda.h"

static int g_fails;
static uint64_t g_rng = 0x5eed5eedULL;

static float rnd(void) { return 2.0f * sp_kern_rng_float(&g_rng) - 1.0f; }   /* [-1, 1) */

static float *rnd_vec(size_t n, float scale)
{
    float *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = scale * rnd();
    return v;
}

static void die(const char *what, const char *why)
{
    printf("check_cuda_kern: FAIL: %s: %s\n", what, why);
    exit(1);
}

static void *dev(const void *h, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) die("cudaMalloc", cudaGetErrorString(cudaGetLastError()));
    if (h && bytes && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
        die("cudaMemcpy H2D", cudaGetErrorString(cudaGetLastError()));
    return d;
}

static void host(void *h, const void *d, size_t bytes)
{
    if (cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
        die("cudaMemcpy D2H", cudaGetErrorString(cudaGetLastError()));
}

static void host_to(void *d, const void *h, size_t bytes)
{
    if (cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
        die("cudaMemcpy H2D", cudaGetErrorString(cudaGetLastError()));
}

#define OK(call)                                                     \
    do {                                                             \
        sp_status st_ = (call);                                      \
        if (st_ != SP_OK) die(#call, sp_last_error());               \
    } while (0)

static void compare(const char *op, const float *gpu, const float *cpu, size_t n, double thresh)
{
    double num = 0, den = 0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        double d = (double)gpu[i] - (double)cpu[i];
        num += d * d;
        den += (double)cpu[i] * cpu[i];
        finite &= isfinite(gpu[i]) != 0;
    }
    double nmse = den > 0 ? num / den : num;
    int bad = !finite || !(nmse <= thresh);
    printf("  %-26s n=%-8zu nmse %.3e (threshold %.0e)%s\n", op, n, nmse, thresh, bad ? "  FAIL" : "");
    g_fails += bad;
}

static void t_matmul(sp_cuda_ctx *c)
{
    enum { T = 37, K = 129, N = 70 };
    float *in = rnd_vec(T * K, 1), *w = rnd_vec(K * N, 1), *bias = rnd_vec(N, 1), *cpu = rnd_vec(T * N, 1);
    float *gpu = malloc(T * N * sizeof *gpu);
    float *din = dev(in, sizeof(float) * T * K), *dw = dev(w, sizeof(float) * K * N), *db = dev(bias, sizeof(float) * N);
    float *dout = dev(cpu, sizeof(float) * T * N);   /* same start for the accumulate pass */
    sp_kern_wview wv = {SP_DT_F32, w, N, NULL};
    for (int acc = 0; acc < 2; acc++) {
        OK(sp_kern_matmul(cpu, in, &wv, acc ? NULL : bias, T, K, N, acc ? SP_KERN_ACCUMULATE : SP_KERN_OVERWRITE,
                          NULL, 0));
        OK(sp_cuda_matmul(c, dout, din, dw, acc ? NULL : db, T, K, N, acc));
        OK(sp_cuda_sync(c));
        host(gpu, dout, sizeof(float) * T * N);
        compare(acc ? "matmul (accumulate)" : "matmul (+bias)", gpu, cpu, T * N, 1e-10);
    }
    cudaFree(din), cudaFree(dw), cudaFree(db), cudaFree(dout);
    free(in), free(w), free(bias), free(cpu), free(gpu);
}

static void t_norm(sp_cuda_ctx *c)
{
    enum { T = 9, C = 1000 };
    float *x = rnd_vec(T * C, 3), *gain = rnd_vec(C, 1), *bias = rnd_vec(C, 1);
    for (int i = 0; i < T * C; i++) x[i] += 0.5f;   /* non-zero mean */
    float *cpu = malloc(T * C * sizeof *cpu), *gpu = malloc(T * C * sizeof *gpu), stats[2 * T];
    float *dx = dev(x, sizeof(float) * T * C), *dg = dev(gain, sizeof(float) * C), *db = dev(bias, sizeof(float) * C);
    float *dout = dev(NULL, sizeof(float) * T * C);
    for (int ln = 0; ln < 2; ln++) {
        sp_kern_norm(x, T, C, gain, ln ? bias : NULL, 1e-5f, ln ? SP_NORM_LAYERNORM : SP_NORM_RMSNORM, stats, cpu);
        OK(sp_cuda_norm(c, dout, dx, T, C, dg, ln ? db : NULL, 1e-5f, ln));
        OK(sp_cuda_sync(c));
        host(gpu, dout, sizeof(float) * T * C);
        compare(ln ? "layernorm" : "rmsnorm", gpu, cpu, T * C, 1e-11);
    }
    cudaFree(dx), cudaFree(dg), cudaFree(db), cudaFree(dout);
    free(x), free(gain), free(bias), free(cpu), free(gpu);
}

static void t_rope(sp_cuda_ctx *c)
{
    enum { T = 5, NH = 3, D = 64 };
    float *x = rnd_vec(T * NH * D, 1), *gpu = malloc(T * NH * D * sizeof *gpu);
    int64_t pos[T] = {0, 1, 17, 300, 4095};
    float *dx = dev(x, sizeof(float) * T * NH * D);
    int64_t *dp = dev(pos, sizeof pos);
    OK(sp_kern_rope(x, T, NH, D, pos, 10000.0));
    OK(sp_cuda_rope(c, dx, T, NH, D, dp, 10000.0));
    OK(sp_cuda_sync(c));
    host(gpu, dx, sizeof(float) * T * NH * D);
    compare("rope (rotate_half)", gpu, x, T * NH * D, 1e-11);
    cudaFree(dx), cudaFree(dp);
    free(x), free(gpu);
}

static void t_attention(sp_cuda_ctx *c)
{
    enum { B = 2, LQ = 3, H = 4, KVH = 2, D = 32, LMAX = 40, POS0 = 17 };
    size_t nq = (size_t)B * LQ * H * D, nkv = (size_t)B * LMAX * KVH * D;
    float *q = rnd_vec(nq, 1), *kc = rnd_vec(nkv, 1), *vc = rnd_vec(nkv, 1);   /* both: (B, LMAX, KVH, D) */
    float *cpu = malloc(nq * sizeof *cpu), *gpu = malloc(nq * sizeof *gpu);
    size_t sb = sp_kern_attention_scratch_bytes(LMAX);
    void *scr = malloc(sb ? sb : 1);
    float *dq = dev(q, nq * sizeof(float)), *dk = dev(kc, nkv * sizeof(float)), *dv = dev(vc, nkv * sizeof(float));
    float *dout = dev(NULL, nq * sizeof(float));
    /* all heads; then a chip's share: query heads [2, 4) over kv head 1 only (cache of one head) */
    for (int part = 0; part < 2; part++) {
        int64_t h0 = part ? 2 : 0, hl = part ? 2 : H, kv0 = part ? 1 : 0, kvhl = part ? 1 : KVH;
        float *k1 = kc, *v1 = vc;
        if (part) {   /* (B, LMAX, 1, D): kv head 1 of every position */
            k1 = malloc(nkv / 2 * sizeof *k1), v1 = malloc(nkv / 2 * sizeof *v1);
            for (size_t r = 0; r < (size_t)B * LMAX; r++)
                for (int d = 0; d < D; d++) {
                    k1[r * D + d] = kc[(r * KVH + 1) * D + d];
                    v1[r * D + d] = vc[(r * KVH + 1) * D + d];
                }
            cudaMemcpy(dk, k1, nkv / 2 * sizeof(float), cudaMemcpyHostToDevice);
            cudaMemcpy(dv, v1, nkv / 2 * sizeof(float), cudaMemcpyHostToDevice);
        }
        sp_kern_kv kv = {SP_DT_F32, k1, v1, B, LMAX, kvhl, D};
        OK(sp_kern_attention(cpu, q, &kv, LQ, POS0, H, KVH, h0, hl, kv0, scr, sb));   /* q read as (B, LQ, hl, D) */
        OK(sp_cuda_attention(c, dout, dq, SP_DT_F32, dk, dv, B, LMAX, kvhl, D, LQ, POS0, H, KVH, h0, hl, kv0));
        OK(sp_cuda_sync(c));
        size_t n = (size_t)B * LQ * hl * D;
        host(gpu, dout, n * sizeof(float));
        compare(part ? "attention (heads 2..3)" : "attention (GQA, KV cache)", gpu, cpu, n, 1e-10);
        if (part) free(k1), free(v1);
    }
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout);
    free(q), free(kc), free(vc), free(cpu), free(gpu), free(scr);
}

/* the executor's split forms: norm stats / apply, bias on valid columns, residual add, positions, LM head */
static void t_exec_ops(sp_cuda_ctx *c)
{
    enum { T = 6, C = 300, CL = 100, N = 40, NV = 33, V = 70, LD = 310 };
    /* dout, cpu and gpu hold the largest result: T x CL (norm apply) */
    enum { OUT = T * CL };
    _Static_assert(OUT >= T * V && OUT >= T * N, "OUT holds the logits and the bias rows");
    float *x = rnd_vec(T * C, 2), *gain = rnd_vec(C, 1), *bias = rnd_vec(C, 1), *table = rnd_vec(V * LD, 1);
    float *cpu = malloc(OUT * sizeof *cpu), *gpu = malloc(OUT * sizeof *gpu), st[2 * T], gst[2 * T];
    float *dx = dev(x, sizeof(float) * T * C), *dg = dev(gain, sizeof(float) * C), *db = dev(bias, sizeof(float) * C);
    float *dt = dev(table, sizeof(float) * V * LD), *dout = dev(NULL, sizeof(float) * OUT);
    float *dst = dev(NULL, sizeof st);
    sp_kern_norm_stats(x, T, CL, st);   /* the first CL columns, viewed as rows of CL: stride CL */
    OK(sp_cuda_norm_stats(c, dx, T, CL, dst));
    OK(sp_cuda_sync(c));
    host(gst, dst, sizeof gst);
    compare("norm stats (local cols)", gst, st, 2 * T, 1e-12);
    for (int ln = 0; ln < 2; ln++) {
        sp_kern_norm_apply(x, st, C, T, CL, gain, ln ? bias : NULL, 1e-5f, ln ? SP_NORM_LAYERNORM : SP_NORM_RMSNORM,
                           cpu);
        OK(cudaMemcpy(dst, st, sizeof st, cudaMemcpyHostToDevice) == cudaSuccess ? SP_OK : SP_ECUDA);
        OK(sp_cuda_norm_apply(c, dx, dst, C, T, CL, dg, ln ? db : NULL, 1e-5f, ln, dout));
        OK(sp_cuda_sync(c));
        host(gpu, dout, sizeof(float) * T * CL);
        compare(ln ? "layernorm apply (split)" : "rmsnorm apply (split)", gpu, cpu, T * CL, 1e-12);
    }
    memcpy(cpu, x, sizeof(float) * T * N);
    for (int r = 0; r < T; r++)
        for (int j = 0; j < NV; j++) cpu[r * N + j] += bias[j];
    for (int i = 0; i < T * N; i++) cpu[i] += x[i];
    OK(cudaMemcpy(dout, x, sizeof(float) * T * N, cudaMemcpyHostToDevice) == cudaSuccess ? SP_OK : SP_ECUDA);
    OK(sp_cuda_bias_add(c, dout, db, T, N, NV));
    OK(sp_cuda_add(c, dout, dx, T * N));
    OK(sp_cuda_sync(c));
    host(gpu, dout, sizeof(float) * T * N);
    compare("bias (valid cols) + add", gpu, cpu, T * N, 1e-14);
    int64_t pos[T] = {0, 5, 9, 1, 69, 3};
    int64_t *dp = dev(pos, sizeof pos);
    memcpy(cpu, x, sizeof(float) * T * N);
    sp_kern_pos_add(cpu, T, N, table + 7, LD, pos);
    OK(cudaMemcpy(dout, x, sizeof(float) * T * N, cudaMemcpyHostToDevice) == cudaSuccess ? SP_OK : SP_ECUDA);
    OK(sp_cuda_pos_add(c, dout, T, N, SP_DT_F32, dt + 7, LD, dp));
    OK(sp_cuda_sync(c));
    host(gpu, dout, sizeof(float) * T * N);
    compare("learned positions", gpu, cpu, T * N, 1e-14);
    for (int t = 1; t >= 0; t--) {   /* one row (gemv on the CPU), then T rows */
        int64_t rows = t ? 1 : T;
        sp_kern_logits(cpu, x, table, LD, rows, C, V);
        OK(sp_cuda_logits(c, dout, dx, SP_DT_F32, dt, LD, rows, C, V, NULL, 0));
        OK(sp_cuda_sync(c));
        host(gpu, dout, sizeof(float) * (size_t)(rows * V));
        compare(t ? "logits (one row)" : "logits", gpu, cpu, (size_t)(rows * V), 1e-10);
    }
    cudaFree(dx), cudaFree(dg), cudaFree(db), cudaFree(dt), cudaFree(dout), cudaFree(dst), cudaFree(dp);
    free(x), free(gain), free(bias), free(table), free(cpu), free(gpu);
}

/* weights stored as every dtype, on a view wider than the product (ld > N): the CPU's
 * paths (gemv / fused small-T / tiles) against column tiles of a small workspace */
static void t_matmul_wv(sp_cuda_ctx *c)
{
    enum { TMAX = 37, K = 129, N = 70, LD = 75, TILE = 16 };
    static const sp_dtype dts[] = {SP_DT_F32, SP_DT_BF16, SP_DT_F16, SP_DT_INT8, SP_DT_FP8};
    float *in = rnd_vec(TMAX * K, 1), *wf = rnd_vec(K * LD, 1), *scale = rnd_vec(LD, 0.05f);
    float *start = rnd_vec(TMAX * N, 1), *cpu = malloc(TMAX * N * sizeof *cpu), *gpu = malloc(TMAX * N * sizeof *gpu);
    void *w = malloc((size_t)K * LD * sizeof(float));   /* storage of any dtype */
    size_t ws_bytes = (size_t)K * TILE * sizeof(float) + 12;   /* 16 columns a tile: 4 tiles and one of 6 */
    float *din = dev(in, sizeof(float) * TMAX * K), *dsc = dev(scale, sizeof(float) * LD);
    float *dout = dev(NULL, sizeof(float) * TMAX * N), *dws = dev(NULL, ws_bytes);
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        sp_dtype dt = dts[d];
        for (int i = 0; i < K * LD; i++) {
            switch (dt) {
            case SP_DT_BF16: ((uint16_t *)w)[i] = sp_kern_f32_to_bf16(wf[i]); break;
            case SP_DT_F16: ((uint16_t *)w)[i] = sp_kern_f32_to_f16(wf[i]); break;
            case SP_DT_INT8: ((int8_t *)w)[i] = (int8_t)lrintf(127.0f * wf[i]); break;
            case SP_DT_FP8: ((uint8_t *)w)[i] = sp_kern_f32_to_fp8(wf[i]); break;
            default: ((float *)w)[i] = wf[i]; break;
            }
        }
        void *dw = dev(w, (size_t)K * LD * (size_t)sp_dtype_bytes(dt));
        sp_kern_wview v = {dt, w, LD, scale};
        size_t sb = sp_kern_matmul_scratch_bytes(&v, K, N);
        void *scr = malloc(sb ? sb : 1);
        for (int t = 0; t < 3; t++) {   /* one row (decode), 5 rows (the small-T kernel), TMAX (tiles) */
            int64_t T = t == 2 ? TMAX : t ? 5 : 1;
            for (int acc = 0; acc < 2; acc++) {
                memcpy(cpu, start, sizeof(float) * (size_t)(T * N));
                host_to(dout, start, sizeof(float) * (size_t)(T * N));
                OK(sp_kern_matmul(cpu, in, &v, NULL, T, K, N, acc ? SP_KERN_ACCUMULATE : SP_KERN_OVERWRITE, scr, sb));
                OK(sp_cuda_matmul_wv(c, dout, din, dt, dw, LD, dsc, T, K, N, acc, dws, ws_bytes));
                OK(sp_cuda_sync(c));
                host(gpu, dout, sizeof(float) * (size_t)(T * N));
                char name[64];
                snprintf(name, sizeof name, "matmul %s T=%lld%s", sp_dtype_name(dt), (long long)T, acc ? " (acc)" : "");
                compare(name, gpu, cpu, (size_t)(T * N), 1e-10);
            }
        }
        if (dt == SP_DT_BF16) {   /* a workspace without room for one column is refused */
            sp_status st = sp_cuda_matmul_wv(c, dout, din, dt, dw, LD, dsc, 1, K, N, 0, dws, (size_t)K * 4 - 1);
            int bad = st != SP_EINVAL;
            printf("  %-26s %s%s\n", "matmul (workspace < K)", st ? sp_last_error() : "accepted", bad ? "  FAIL" : "");
            g_fails += bad;
        }
        cudaFree(dw);
        free(scr);
    }
    cudaFree(din), cudaFree(dsc), cudaFree(dout), cudaFree(dws);
    free(in), free(wf), free(scale), free(start), free(cpu), free(gpu), free(w);
}

/* vocabulary / position tables stored BF16 and F16: embed (bit-identical), positions, LM head in row tiles */
static void t_tables(sp_cuda_ctx *c)
{
    enum { T = 6, E = 300, V = 70, LD = 310, E0 = 7, EL = 40, V0 = 10, TILE = 16 };
    int32_t tok[T] = {10, 79, 9, 80, 45, 10};   /* rows 0, 69, below, above, 35, 0 */
    int64_t pos[T] = {0, 5, 9, 1, 69, 3};
    float *tf = rnd_vec(V * LD, 1), *x = rnd_vec(T * E, 1);
    uint16_t *th = malloc(V * LD * sizeof *th);
    float *cpu = malloc(T * V * sizeof *cpu), *gpu = malloc(T * V * sizeof *gpu);
    size_t ws_bytes = (size_t)TILE * E * sizeof(float);   /* 16 rows a tile: 4 tiles and one of 6 */
    float *dx = dev(x, sizeof(float) * T * E), *dout = dev(NULL, sizeof(float) * T * V), *dws = dev(NULL, ws_bytes);
    int32_t *dtok = dev(tok, sizeof tok);
    int64_t *dp = dev(pos, sizeof pos);
    uint16_t *dtab = dev(NULL, V * LD * sizeof *th);
    for (int k = 0; k < 2; k++) {
        sp_dtype dt = k ? SP_DT_F16 : SP_DT_BF16;
        for (int i = 0; i < V * LD; i++) th[i] = k ? sp_kern_f32_to_f16(tf[i]) : sp_kern_f32_to_bf16(tf[i]);
        host_to(dtab, th, V * LD * sizeof *th);
        sp_kern_wview tv = {dt, th, LD, NULL};
        char name[64];
        OK(sp_kern_embed_wv(cpu, tok, T, &tv, V0, V, E0, EL));
        OK(sp_cuda_embed(c, dout, dtok, T, dt, dtab + E0, LD, EL, V0, V));
        OK(sp_cuda_sync(c));
        host(gpu, dout, sizeof(float) * T * EL);
        int bad = memcmp(cpu, gpu, sizeof(float) * T * EL) != 0;
        snprintf(name, sizeof name, "embed %s", sp_dtype_name(dt));
        printf("  %-26s n=%-8d %s\n", name, T * EL, bad ? "differs  FAIL" : "bit-identical");
        g_fails += bad;
        memcpy(cpu, x, sizeof(float) * T * EL);
        host_to(dout, x, sizeof(float) * T * EL);
        OK(sp_kern_pos_add_wv(cpu, T, EL, &tv, E0, pos));
        OK(sp_cuda_pos_add(c, dout, T, EL, dt, dtab + E0, LD, dp));
        OK(sp_cuda_sync(c));
        host(gpu, dout, sizeof(float) * T * EL);
        snprintf(name, sizeof name, "positions %s", sp_dtype_name(dt));
        compare(name, gpu, cpu, T * EL, 1e-14);
        size_t lsb = sp_kern_logits_scratch_bytes(&tv, E);
        void *lscr = malloc(lsb);
        for (int t = 1; t >= 0; t--) {
            int64_t rows = t ? 1 : T;
            OK(sp_kern_logits_wv(cpu, x, &tv, rows, E, V, lscr, lsb));
            OK(sp_cuda_logits(c, dout, dx, dt, dtab, LD, rows, E, V, dws, ws_bytes));
            OK(sp_cuda_sync(c));
            host(gpu, dout, sizeof(float) * (size_t)(rows * V));
            snprintf(name, sizeof name, "logits %s%s", sp_dtype_name(dt), t ? " (one row)" : "");
            compare(name, gpu, cpu, (size_t)(rows * V), 1e-10);
        }
        free(lscr);
    }
    cudaFree(dx), cudaFree(dout), cudaFree(dws), cudaFree(dtok), cudaFree(dp), cudaFree(dtab);
    free(tf), free(x), free(th), free(cpu), free(gpu);
}

/* KV cache F32 and BF16: append (the cache bit-identical to the CPU's), then attention over it */
static void t_kv(sp_cuda_ctx *c)
{
    enum { B = 2, LQ = 3, H = 4, KVH = 2, D = 32, LMAX = 40, POS0 = 17, ROW = KVH * D };
    size_t nkv = (size_t)B * LMAX * ROW, nnew = (size_t)B * LQ * ROW, nq = (size_t)B * LQ * H * D;
    float *old = rnd_vec(2 * nkv, 1), *k = rnd_vec(nnew, 1), *v = rnd_vec(nnew, 1), *q = rnd_vec(nq, 1);
    float *cpu = malloc(nq * sizeof *cpu), *gpu = malloc(nq * sizeof *gpu);
    void *kc = malloc(nkv * 4), *vc = malloc(nkv * 4), *gk = malloc(nkv * 4), *gv = malloc(nkv * 4);
    size_t sb = sp_kern_attention_scratch_bytes(LMAX);
    void *scr = malloc(sb);
    float *dk = dev(k, nnew * sizeof(float)), *dv = dev(v, nnew * sizeof(float)), *dq = dev(q, nq * sizeof(float));
    float *dout = dev(NULL, nq * sizeof(float));
    for (int k16 = 0; k16 < 2; k16++) {
        sp_dtype dt = k16 ? SP_DT_BF16 : SP_DT_F32;
        size_t eb = (size_t)sp_dtype_bytes(dt);
        for (size_t i = 0; i < nkv; i++) {   /* earlier positions: already in the cache */
            if (k16) {
                ((uint16_t *)kc)[i] = sp_kern_f32_to_bf16(old[i]);
                ((uint16_t *)vc)[i] = sp_kern_f32_to_bf16(old[nkv + i]);
            } else {
                ((float *)kc)[i] = old[i];
                ((float *)vc)[i] = old[nkv + i];
            }
        }
        void *dkc = dev(kc, nkv * eb), *dvc = dev(vc, nkv * eb);
        sp_kern_kv kv = {dt, kc, vc, B, LMAX, KVH, D};
        OK(sp_kern_kv_append(&kv, k, v, LQ, POS0));
        OK(sp_cuda_kv_append(c, dt, dkc, dvc, B, LMAX, ROW, dk, dv, LQ, POS0));
        OK(sp_cuda_sync(c));
        host(gk, dkc, nkv * eb);
        host(gv, dvc, nkv * eb);
        int bad = memcmp(gk, kc, nkv * eb) != 0 || memcmp(gv, vc, nkv * eb) != 0;
        char name[64];
        snprintf(name, sizeof name, "kv append %s", sp_dtype_name(dt));
        printf("  %-26s n=%-8zu %s\n", name, 2 * nkv, bad ? "differs  FAIL" : "bit-identical");
        g_fails += bad;
        OK(sp_kern_attention(cpu, q, &kv, LQ, POS0, H, KVH, 0, H, 0, scr, sb));
        OK(sp_cuda_attention(c, dout, dq, dt, dkc, dvc, B, LMAX, KVH, D, LQ, POS0, H, KVH, 0, H, 0));
        OK(sp_cuda_sync(c));
        host(gpu, dout, nq * sizeof(float));
        snprintf(name, sizeof name, "attention (%s cache)", sp_dtype_name(dt));
        compare(name, gpu, cpu, nq, 1e-10);
        cudaFree(dkc), cudaFree(dvc);
    }
    cudaFree(dk), cudaFree(dv), cudaFree(dq), cudaFree(dout);
    free(old), free(k), free(v), free(q), free(cpu), free(gpu), free(kc), free(vc), free(gk), free(gv), free(scr);
}

static void t_elementwise(sp_cuda_ctx *c)
{
    enum { N = 10007 };
    float *x = rnd_vec(N, 6), *u = rnd_vec(N, 2), *cpu = malloc(N * sizeof *cpu), *gpu = malloc(N * sizeof *gpu);
    float *dx = dev(x, N * sizeof(float)), *du = dev(u, N * sizeof(float)), *dout = dev(NULL, N * sizeof(float));
    sp_kern_gelu(cpu, x, N);
    OK(sp_cuda_gelu(c, dout, dx, N));
    OK(sp_cuda_sync(c));
    host(gpu, dout, N * sizeof(float));
    compare("gelu (tanh)", gpu, cpu, N, 1e-11);
    sp_kern_swiglu(cpu, x, u, N);
    OK(sp_cuda_swiglu(c, dout, dx, du, N));
    OK(sp_cuda_sync(c));
    host(gpu, dout, N * sizeof(float));
    compare("swiglu", gpu, cpu, N, 1e-11);
    cudaFree(dx), cudaFree(du), cudaFree(dout);
    free(x), free(u), free(cpu), free(gpu);
}

static void t_embed(sp_cuda_ctx *c)
{
    enum { T = 7, E = 33, LD = 36, VL = 50, V0 = 10 };
    int32_t tok[T] = {10, 59, 9, 60, 35, 10, 1000};   /* rows 0, 49, below, above, 25, 0, far */
    float *table = rnd_vec(VL * LD, 1), cpu[T * E], gpu[T * E];
    OK(sp_kern_embed(cpu, tok, T, table, LD, V0, VL, 0, E));
    float *dt = dev(table, sizeof(float) * VL * LD), *dout = dev(NULL, sizeof gpu);
    int32_t *dtok = dev(tok, sizeof tok);
    OK(sp_cuda_embed(c, dout, dtok, T, SP_DT_F32, dt, LD, E, V0, VL));
    OK(sp_cuda_sync(c));
    host(gpu, dout, sizeof gpu);
    int bad = memcmp(cpu, gpu, sizeof gpu) != 0;
    printf("  %-26s n=%-8d %s\n", "embed (vocab shard)", T * E, bad ? "differs  FAIL" : "bit-identical");
    g_fails += bad;
    cudaFree(dt), cudaFree(dout), cudaFree(dtok);
    free(table);
}

static void t_argmax(sp_cuda_ctx *c)
{
    enum { T = 4, V = 3001 };
    float *lg = rnd_vec(T * V, 10);
    lg[0 * V + 2999] = 50.0f;                           /* near the end */
    lg[1 * V + 7] = 50.0f, lg[1 * V + 2000] = 50.0f;    /* tie: lowest wins */
    lg[2 * V + 0] = 50.0f;                              /* first */
    lg[3 * V + 5] = NAN, lg[3 * V + 6] = 50.0f;         /* NaN never wins */
    int32_t cpu[T], gpu[T];
    for (int t = 0; t < T; t++) cpu[t] = sp_kern_argmax(lg + (size_t)t * V, V);
    float *dl = dev(lg, sizeof(float) * T * V);
    int32_t *dt = dev(NULL, sizeof gpu);
    OK(sp_cuda_argmax(c, dt, dl, T, V));
    OK(sp_cuda_sync(c));
    host(gpu, dt, sizeof gpu);
    int bad = memcmp(cpu, gpu, sizeof gpu) != 0;
    printf("  %-26s rows=%-5d cpu %d %d %d %d gpu %d %d %d %d%s\n", "argmax", T, cpu[0], cpu[1], cpu[2], cpu[3],
           gpu[0], gpu[1], gpu[2], gpu[3], bad ? "  FAIL" : "");
    g_fails += bad;
    cudaFree(dl), cudaFree(dt);
    free(lg);
}

int main(void)
{
    char why[256];
    if (!sp_cuda_available(why, sizeof why)) {
        printf("check_cuda_kern: SKIP: %s\n", why);
        return 77;
    }
    sp_cuda_ctx *c;
    OK(sp_cuda_ctx_create(0, &c));
    printf("check_cuda_kern: CUDA kernels vs CPU kernels (%s)\n", why);
    t_matmul(c);
    t_norm(c);
    t_rope(c);
    t_attention(c);
    t_exec_ops(c);
    t_matmul_wv(c);
    t_tables(c);
    t_kv(c);
    t_elementwise(c);
    t_embed(c);
    t_argmax(c);
    sp_cuda_ctx_free(c);
    printf("check_cuda_kern: %s (%d failure%s)\n", g_fails ? "FAIL" : "PASS", g_fails, g_fails == 1 ? "" : "s");
    return g_fails ? 1 : 0;
}
