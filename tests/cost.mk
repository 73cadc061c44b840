# tests/cost.mk
