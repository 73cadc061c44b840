# tests/plan.mk
