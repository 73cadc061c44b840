# costmodel/: collective, compute and memory cost functions (above the lowering).
libspcore_la_SOURCES += costmodel/sp_cost.h costmodel/spi_cost.h costmodel/cost.c costmodel/cost_xfer.c costmodel/cost_json.c \
	costmodel/sp_sim.h costmodel/sim.c costmodel/cost_kinds.c
shardplaninclude_HEADERS += costmodel/sp_cost.h costmodel/sp_sim.h
