/*
 * spi_cuda_dl.h: cuBLAS and NCCL loaded at first use (internal).
 *
 * Linking libcublas (with cublasLt) and libnccl into every program costs
 * tens of milliseconds of start-up, paid by `shardplan plan` as much as by
 * `shardplan run --backend cuda`.  Instead the few entry points we call are
 * resolved with dlopen/dlsym by spi_cuda_dl_load(); after this header the
 * usual names (ncclAllGather, cublasSgemm, ...) call through that table, so
 * the code that uses them reads as plain cuBLAS / NCCL.  The CUDA runtime
 * (libcudart) stays linked: it is small.
 */
#ifndef SPI_CUDA_DL_H
#define SPI_CUDA_DL_H
#include <cublas_v2.h>
#if defined(__GNUC__) && !defined(__cplusplus)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"   /* nccl.h: ncclGroupStart() */
#endif
#include <nccl.h>
#if defined(__GNUC__) && !defined(__cplusplus)
#pragma GCC diagnostic pop
#endif
#include "sp_common.h"

#ifdef __cplusplus
#define SPI_DL_FN(f) decltype(&f) f
extern "C" {
#else
#define SPI_DL_FN(f) __typeof__(&f) f
#endif

/* X(name): every entry point, in one list */
#define SPI_CUBLAS_FNS(X) X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasSetStream_v2) X(cublasSgemm_v2)
#define SPI_NCCL_FNS(X)                                                                                      \
    X(ncclGetUniqueId) X(ncclCommInitRankConfig) X(ncclCommFinalize) X(ncclCommDestroy) X(ncclCommAbort)   \
    X(ncclCommGetAsyncError) X(ncclGetErrorString) X(ncclGetLastError) X(ncclAllGather)                   \
    X(ncclReduceScatter) X(ncclAllReduce) X(ncclSend) X(ncclRecv) X(ncclGroupStart) X(ncclGroupEnd)

typedef struct spi_cuda_dl {
#define SPI_DL_FIELD(f) SPI_DL_FN(f);
    SPI_CUBLAS_FNS(SPI_DL_FIELD)
    SPI_NCCL_FNS(SPI_DL_FIELD)
#undef SPI_DL_FIELD
} spi_cuda_dl;

/* Filled by spi_cuda_dl_load; read-only afterwards. */
extern spi_cuda_dl spi_cuda_dl_table;

/* Loads cuBLAS (blas != 0) and/or NCCL (nccl != 0) once per process;
 * thread-safe.  SP_ECUDA with the library and the dlerror() text when one
 * cannot be loaded. */
sp_status spi_cuda_dl_load(int blas, int nccl);

#ifdef __cplusplus
}
#endif

#ifndef SPI_CUDA_DL_LOADER   /* cuda_dl.c itself needs the plain names */
#define cublasCreate_v2 spi_cuda_dl_table.cublasCreate_v2
#define cublasDestroy_v2 spi_cuda_dl_table.cublasDestroy_v2
#define cublasSetStream_v2 spi_cuda_dl_table.cublasSetStream_v2
#define cublasSgemm_v2 spi_cuda_dl_table.cublasSgemm_v2
#define ncclGetUniqueId spi_cuda_dl_table.ncclGetUniqueId
#define ncclCommInitRankConfig spi_cuda_dl_table.ncclCommInitRankConfig
#define ncclCommFinalize spi_cuda_dl_table.ncclCommFinalize
#define ncclCommDestroy spi_cuda_dl_table.ncclCommDestroy
#define ncclCommAbort spi_cuda_dl_table.ncclCommAbort
#define ncclCommGetAsyncError spi_cuda_dl_table.ncclCommGetAsyncError
#define ncclGetErrorString spi_cuda_dl_table.ncclGetErrorString
#define ncclGetLastError spi_cuda_dl_table.ncclGetLastError
#define ncclAllGather spi_cuda_dl_table.ncclAllGather
#define ncclReduceScatter spi_cuda_dl_table.ncclReduceScatter
#define ncclAllReduce spi_cuda_dl_table.ncclAllReduce
#define ncclSend spi_cuda_dl_table.ncclSend
#define ncclRecv spi_cuda_dl_table.ncclRecv
#define ncclGroupStart spi_cuda_dl_table.ncclGroupStart
#define ncclGroupEnd spi_cuda_dl_table.ncclGroupEnd
#endif
#endif
