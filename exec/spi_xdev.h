/*
 * spi_xdev.h: the executor's per-chip compute device (internal).
 *
 * exec*.c (spi_exec.h) are the one interpreter of sp_lower's programs: index arithmetic,
 * offsets, shard building, buffer sizing, statistics and the main loop live
 * there only.  Every operation that touches tensor data goes through the
 * chip's device table below, so the same steps run on the CPU (xdev_cpu.c:
 * kernels/cpu, buffers in host memory) or on a GPU (xdev_cuda.c:
 * kernels/cuda and cuBLAS, buffers in device memory, used with the NCCL
 * communicator).  Operations take and return what sp_kern.h's kernels do;
 * pointers named host are host memory on every device, all others live in
 * the device's memory (a weight view's data and INT8/FP8 scales included).
 * Both devices take every dtype the interpreter builds: weights F32, BF16,
 * F16, INT8, FP8, tables F32/BF16/F16, KV cache F32 or BF16.
 *
 * Ordering.  A device may queue work (CUDA: one stream per chip); results
 * are in place for the next operation of the same chip.  Before a buffer is
 * handed to the communicator the interpreter calls sync (the NCCL backend
 * reads device memory from its own stream); the communicator's calls return
 * once their results are in place.  download waits for the queue.
 */
#ifndef SPI_XDEV_H
#define SPI_XDEV_H
#include <stddef.h>
#include <stdint.h>
#include "sp_common.h"
#include "kernels/cpu/sp_kern.h"

typedef struct spi_xops spi_xops;

/* One chip's device: the table, the backend's state, the CPU kernels' scratch. */
typedef struct spi_xdev {
    const spi_xops *ops;
    void *impl;                      /* CUDA: the chip's context and staging buffers */
    void *at_scr;                    /* CPU attention scores (host): the program's SP_SCR_SCORES slot */
    size_t at_bytes;
    /* the lowering's dequantisation workspace, sp_lower_mem_sizes' workspace bytes exactly (0 for
     * F32 weights), in the chip's memory: every device's matmul and logits kernels size their
     * fp32 tiles over 16-bit / 8-bit weights and tables to it */
    void *ws;
    size_t ws_bytes;
} spi_xdev;

struct spi_xops {
    const char *name;
    int host_memory;   /* 1: buffers are host memory (the communicator moves host memory) */
    sp_status (*open)(spi_xdev *d);     /* CUDA: on the calling thread's current device */
    void (*close)(spi_xdev *d);
    /* memory */
    sp_status (*alloc)(spi_xdev *d, size_t bytes, void **out);   /* zeroed; release frees */
    void (*release)(spi_xdev *d, void *p);                        /* NULL is a no-op */
    sp_status (*upload)(spi_xdev *d, void *dst, const void *host, size_t bytes);
    sp_status (*download)(spi_xdev *d, void *host, const void *src, size_t bytes);
    /* rows of width bytes from src (pitch spitch bytes) to dst (pitch dpitch) */
    sp_status (*copy2d)(spi_xdev *d, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                        size_t rows);
    sp_status (*zero)(spi_xdev *d, void *p, size_t bytes);
    sp_status (*sync)(spi_xdev *d);
    /* kernels: the arguments and semantics of the sp_kern_* function named */
    sp_status (*embed)(spi_xdev *d, float *out, const int32_t *host_tokens, int64_t T, const sp_kern_wview *table,
                       int64_t v0, int64_t Vl, int64_t e0, int64_t El);                       /* embed_wv */
    sp_status (*pos_add)(spi_xdev *d, float *x, int64_t T, int64_t El, const sp_kern_wview *table, int64_t e0,
                         const int64_t *host_pos);                                            /* pos_add_wv */
    sp_status (*norm_stats)(spi_xdev *d, const float *x, int64_t T, int64_t Cl, float *stats);
    sp_status (*norm_apply)(spi_xdev *d, const float *x, const float *stats, int64_t C, int64_t T, int64_t Cl,
                            const float *gain, const float *bias, float eps, sp_norm_kind kind, float *out);
    sp_status (*matmul)(spi_xdev *d, float *out, const float *in, const sp_kern_wview *w, int64_t T, int64_t K,
                        int64_t N, int mode);
    /* out (T, N) += bias[j] for the columns j < nvalid (the bias is already offset) */
    sp_status (*bias_add)(spi_xdev *d, float *out, const float *bias, int64_t T, int64_t N, int64_t nvalid);
    sp_status (*act)(spi_xdev *d, float *out, const float *x, const float *up, int64_t n, sp_act_kind kind);
    sp_status (*add)(spi_xdev *d, float *out, const float *x, int64_t n);
    /* rope_freqs: host_inv_freq (R/2) */
    sp_status (*rope)(spi_xdev *d, float *x, int64_t T, int64_t nh, int64_t D, int64_t R, const int64_t *host_pos,
                      const double *host_inv_freq, double scale);
    sp_status (*kv_append)(spi_xdev *d, sp_kern_kv *kv, const float *k, const float *v, int64_t Lq, int64_t pos0);
    sp_status (*attention)(spi_xdev *d, float *out, const float *q, const sp_kern_kv *kv, int64_t Lq, int64_t pos0,
                           int64_t H, int64_t KVH, int64_t h0, int64_t Hl, int64_t kv0);
    sp_status (*logits)(spi_xdev *d, float *logits, const float *x, const sp_kern_wview *table, int64_t T,
                        int64_t E, int64_t Vl);                                               /* logits_wv */
    sp_status (*argmax)(spi_xdev *d, const float *logits, int64_t V, int32_t *host_token);
};

extern const spi_xops spi_xops_cpu;
/* The CUDA table; NULL in a build without CUDA. */
const spi_xops *spi_xops_cuda(void);

#endif /* SPI_XDEV_H */
