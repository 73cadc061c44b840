# src/: library core (descriptions, JSON I/O, layouts, lowering) that every
# other layer builds on; the planner is in plan/, the program in cli/.
# libspcore.la holds every object of the library; libshardplan.la is the
# installed face of it, exporting only the public sp_ symbols.  The CLI and
# the tests link libspcore.la so they may use internal (spi_) helpers.
noinst_LTLIBRARIES += libspcore.la
libspcore_la_SOURCES = \
	src/sp_common.h src/spi_common.h src/spi_ckd.h src/common.c \
	src/spi_json.h src/spi_model.h src/json_util.c \
	src/sp_model.h src/model.c src/model_hf.c \
	src/sp_hw.h src/hw.c src/hw_calib.c \
	src/sp_mesh.h src/mesh.c \
	src/sp_layout.h src/layout.c \
	src/sp_lower.h src/spi_lower.h src/lower.c src/lower_xfer.c \
	src/sp_ragged.h src/ragged.c \
	src/sp_trace.h src/trace.c \
	src/sp_measure.h src/measure.c \
	src/sp_validate.h src/validate.c
libspcore_la_LIBADD = $(SP_DEP_LIBS)

lib_LTLIBRARIES += libshardplan.la
libshardplan_la_SOURCES =
libshardplan_la_LIBADD = libspcore.la $(SP_DEP_LIBS)
libshardplan_la_LDFLAGS = -no-undefined -export-symbols-regex '^sp_' -version-info $(SP_LT_VERSION)

shardplanincludedir = $(includedir)/shardplan
shardplaninclude_HEADERS = src/sp_common.h src/sp_model.h src/sp_hw.h src/sp_mesh.h src/sp_layout.h src/sp_lower.h src/sp_ragged.h src/sp_trace.h src/sp_measure.h src/sp_validate.h
nodist_shardplaninclude_HEADERS = src/sp_version.h
