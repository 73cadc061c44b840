# bench/kern.mk
