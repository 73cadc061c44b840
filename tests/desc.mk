# tests/desc.mk
