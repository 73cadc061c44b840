/* cuda_dl.c: resolves the cuBLAS and NCCL entry points at first use
 * (spi_cuda_dl.h says why).  Compiled by the C compiler, not nvcc. */
#include "config.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include "spi_common.h"
#define SPI_CUDA_DL_LOADER 1
#include "kernels/cuda/spi_cuda_dl.h"

spi_cuda_dl spi_cuda_dl_table;

static pthread_mutex_t dl_mu = PTHREAD_MUTEX_INITIALIZER;
static int blas_state, nccl_state;   /* 0 not tried, 1 loaded, -1 failed */
static char blas_err[256], nccl_err[256];

/* the toolkit's directory first (configure found it there), then the loader's search path */
static void *open_lib(const char *name, char *err, size_t size)
{
    char path[512];
    void *h = NULL;
#ifdef SP_CUDA_LIBDIR
    snprintf(path, sizeof path, "%s/%s", SP_CUDA_LIBDIR, name);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
#endif
    if (!h) h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) snprintf(err, size, "cannot load %s: %s", name, dlerror());
    return h;
}

#define SPI_DL_SYM(f)                                                                       \
    if (ok) {                                                                               \
        *(void **)(void *)&t->f = dlsym(h, #f);                                             \
        if (!t->f) {                                                                        \
            snprintf(err, size, "%s lacks %s", lib, #f);                                    \
            ok = 0;                                                                         \
        }                                                                                   \
    }

static int load_blas(spi_cuda_dl *t, char *err, size_t size)
{
    const char *lib = "libcublas.so";
    void *h = open_lib(lib, err, size);
    int ok = h != NULL;
    SPI_CUBLAS_FNS(SPI_DL_SYM)
    return ok;
}

static int load_nccl(spi_cuda_dl *t, char *err, size_t size)
{
    const char *lib = "libnccl.so";
    void *h = open_lib(lib, err, size);
    int ok = h != NULL;
    SPI_NCCL_FNS(SPI_DL_SYM)
    return ok;
}

sp_status spi_cuda_dl_load(int blas, int nccl)
{
    pthread_mutex_lock(&dl_mu);
    if (blas && !blas_state) blas_state = load_blas(&spi_cuda_dl_table, blas_err, sizeof blas_err) ? 1 : -1;
    if (nccl && !nccl_state) nccl_state = load_nccl(&spi_cuda_dl_table, nccl_err, sizeof nccl_err) ? 1 : -1;
    int bad_blas = blas && blas_state < 0, bad_nccl = nccl && nccl_state < 0;
    pthread_mutex_unlock(&dl_mu);
    if (bad_blas) return spi_fail(SP_ECUDA, "%s", blas_err);
    if (bad_nccl) return spi_fail(SP_ECUDA, "%s", nccl_err);
    return SP_OK;
}
