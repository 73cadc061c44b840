# exec/comm.mk
