# exec/comm.mk: the communicator (front, threads backend).
# The MPI / NCCL backends add exec/comm_mpi.c / exec/comm_nccl.c here under
# `if HAVE_MPI` / `if HAVE_CUDA` and flip SPI_COMM_*_LINKED in exec/spi_comm.h.
libspcore_la_SOURCES += exec/sp_comm.h exec/spi_comm.h exec/comm.c exec/comm_threads.c
shardplaninclude_HEADERS += exec/sp_comm.h
if HAVE_MPI
libspcore_la_SOURCES += exec/comm_mpi.c exec/spi_mpi.h
endif
if HAVE_CUDA
libspcore_la_SOURCES += exec/comm_nccl.c
endif
