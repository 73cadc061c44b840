/*
 * spi_blas_dl.h: the CBLAS entry points, opened at first use (internal).
 *
 * A threaded OpenBLAS starts its worker threads when it is loaded, and they
 * spin for a while in every process, `shardplan plan` included, which never
 * multiplies a matrix.  So the library is dlopen()ed by spi_blas_load() the
 * first time a kernel needs it, and after this header cblas_sgemm and
 * cblas_sgemv call through that table.  (The serial OpenBLAS would avoid the
 * workers but is not safe to call from several chip threads at once.)
 */
#ifndef SPI_BLAS_DL_H
#define SPI_BLAS_DL_H
#include <cblas.h>
#include "sp_common.h"

typedef struct spi_blas_dl {
    __typeof__(&cblas_sgemm) cblas_sgemm;
    __typeof__(&cblas_sgemv) cblas_sgemv;
    void (*set_num_threads)(int);   /* openblas_set_num_threads, or NULL */
} spi_blas_dl;

extern spi_blas_dl spi_blas_dl_table;

/* Opens the BLAS once per process (thread-safe).  SP_EIO with the library
 * names tried and dlerror() when none loads. */
sp_status spi_blas_load(void);

#ifndef SPI_BLAS_DL_LOADER
#define cblas_sgemm spi_blas_dl_table.cblas_sgemm
#define cblas_sgemv spi_blas_dl_table.cblas_sgemv
#endif
#endif
