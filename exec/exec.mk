# exec/exec.mk: the program interpreter (runs sp_lower's per-chip programs)
# and its per-chip devices: the CPU, and CUDA (a stub without the toolkit).
libspcore_la_SOURCES += exec/sp_exec.h exec/spi_exec.h exec/exec.c exec/exec_mem.c exec/exec_weights.c exec/exec_coll.c exec/exec_step.c exec/exec_xfer.c exec/spi_xdev.h exec/xdev_cpu.c exec/xdev_cuda.c \
	exec/sp_calib.h exec/calib.c
# public headers of the runtime (installed beside the core's under include/shardplan)
shardplaninclude_HEADERS += exec/sp_exec.h exec/sp_weights.h exec/sp_ref.h exec/sp_calib.h
