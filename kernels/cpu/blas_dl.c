/* blas_dl.c: opens the CBLAS library at first use (spi_blas_dl.h says why). */
#include "config.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#define SPI_BLAS_DL_LOADER 1
#include "spi_common.h"
#include "kernels/cpu/spi_blas_dl.h"

spi_blas_dl spi_blas_dl_table;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static sp_status load_status = SP_OK;
static char load_err[512];

static void load(void)
{
    /* the library configure linked against first, then common CBLAS sonames */
    static const char *const names[] = {SP_BLAS_SONAME, "libopenblas.so.0", "libcblas.so.3", "libblas.so.3"};
    size_t n = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
        if (!h) {
            int w = snprintf(load_err + n, sizeof load_err - n, "%s%s", n ? "; " : "", dlerror());
            if (w > 0 && (size_t)w < sizeof load_err - n) n += (size_t)w;
            continue;
        }
        *(void **)(void *)&spi_blas_dl_table.cblas_sgemm = dlsym(h, "cblas_sgemm");
        *(void **)(void *)&spi_blas_dl_table.cblas_sgemv = dlsym(h, "cblas_sgemv");
        *(void **)(void *)&spi_blas_dl_table.set_num_threads = dlsym(h, "openblas_set_num_threads");
        if (spi_blas_dl_table.cblas_sgemm && spi_blas_dl_table.cblas_sgemv) return;
        memset(&spi_blas_dl_table, 0, sizeof spi_blas_dl_table);
        snprintf(load_err + n, sizeof load_err - n, "%s%s has no cblas_sgemm/cblas_sgemv", n ? "; " : "", names[i]);
        n = strlen(load_err);
    }
    load_status = SP_EIO;
}

sp_status spi_blas_load(void)
{
    pthread_once(&once, load);
    if (load_status != SP_OK) return spi_fail(load_status, "cannot open a CBLAS library: %s", load_err);
    return SP_OK;
}
