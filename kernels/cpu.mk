# kernels/cpu.mk: CPU kernels (CBLAS sgemm + own norm/RoPE/attention/activation/sampling).
libspcore_la_SOURCES += \
	kernels/spi_conv.h kernels/cpu/sp_kern.h kernels/cpu/matmul.c kernels/cpu/ops.c \
	kernels/cpu/attention.c kernels/cpu/sample.c \
	kernels/cpu/spi_blas_dl.h kernels/cpu/blas_dl.c
shardplaninclude_HEADERS += kernels/cpu/sp_kern.h
