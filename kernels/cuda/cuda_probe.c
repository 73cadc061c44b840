/* cuda_probe.c: run by tests/cuda_skip.sh (and by cuda_run.sh / cli_run.sh to
 * learn whether, and how many, GPUs are visible).  Exits 77 (skip) with the
 * reason when no GPU is visible; otherwise prints the device count, checks
 * cuBLAS GEMM and argmax against a host computation on small exact data and
 * exits 0 / 1. */
#include "config.h"
#include <cuda_runtime.h>
#include <stdio.h>
#include "kernels/cuda/sp_cuda.h"

int main(void)
{
    char why[256];
    if (!sp_cuda_available(why, sizeof why)) {
        printf("cuda_probe: SKIP: %s\n", why);
        return 77;
    }
    printf("cuda_probe: %s\n", why);   /* "N CUDA device(s)": tests/cuda_run.sh reads N */
    enum { T = 3, K = 4, N = 5 };
    float a[T * K], w[K * N], want[T * N], got[T * N];
    for (int i = 0; i < T * K; i++) a[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < K * N; i++) w[i] = (float)(i % 5) - 2.0f;
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            float s = 0;
            for (int k = 0; k < K; k++) s += a[t * K + k] * w[k * N + n];
            want[t * N + n] = s;
        }
    sp_cuda_ctx *c;
    if (sp_cuda_ctx_create(0, &c) != SP_OK) {
        printf("cuda_probe: FAIL: %s\n", sp_last_error());
        return 1;
    }
    float *da, *dw, *dout;
    int32_t *dtok, tok[T];
    cudaMalloc((void **)&da, sizeof a);
    cudaMalloc((void **)&dw, sizeof w);
    cudaMalloc((void **)&dout, sizeof got);
    cudaMalloc((void **)&dtok, sizeof tok);
    cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w, sizeof w, cudaMemcpyHostToDevice);
    int bad = sp_cuda_matmul(c, dout, da, dw, NULL, T, K, N, 0) != SP_OK;
    bad |= sp_cuda_argmax(c, dtok, dout, T, N) != SP_OK;
    bad |= sp_cuda_sync(c) != SP_OK;
    cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost);
    cudaMemcpy(tok, dtok, sizeof tok, cudaMemcpyDeviceToHost);
    for (int i = 0; i < T * N; i++) bad |= got[i] != want[i];
    for (int t = 0; t < T; t++) {
        int best = 0;
        for (int n = 1; n < N; n++)
            if (want[t * N + n] > want[t * N + best]) best = n;
        bad |= tok[t] != best;
    }
    sp_cuda_ctx_free(c);
    printf("cuda_probe: %s\n", bad ? "FAIL" : "PASS (gemm, argmax)");
    return bad;
}
