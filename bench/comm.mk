# bench/comm.mk
