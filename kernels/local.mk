# kernels/: compute kernels.  cpu/ always; cuda/ when configure found the toolkit.
include kernels/cpu.mk
include kernels/cuda.mk
