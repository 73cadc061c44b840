# exec/ref.mk
