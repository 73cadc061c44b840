# bench/cost.mk
