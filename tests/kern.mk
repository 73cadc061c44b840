# tests/kern.mk
