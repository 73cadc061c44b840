# exec/ref.mk: fp32 weights (random, quantisation round trip, safetensors) and
# the single-chip reference forward pass.
libspcore_la_SOURCES += \
	exec/sp_weights.h exec/weights.c exec/safetensors.c exec/spi_hf.h \
	exec/sp_ref.h exec/ref.c
