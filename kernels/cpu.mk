# kernels/cpu.mk
