# exec/exec.mk: the program interpreter (runs sp_lower's per-chip programs).
libspcore_la_SOURCES += exec/sp_exec.h exec/exec.c
