/*
 * spi_mpi.h: the MPI plumbing shared by the MPI and NCCL backends (internal;
 * comm_mpi.c).  MPI is initialised once per process, by whichever backend
 * needs it first, and finalised at exit only if we initialised it and no
 * world aborted (an aborted job ends by MPI_Abort in the program instead).
 */
#ifndef SPI_MPI_H
#define SPI_MPI_H
#include <mpi.h>
#include "exec/spi_comm.h"

/* Initialises MPI if needed (MPI_THREAD_SERIALIZED; finalized at exit as
 * above) and duplicates MPI_COMM_WORLD with MPI_ERRORS_RETURN into *comm;
 * *rank and *size: this process's rank and the job's size.  Errors name `who`. */
sp_status spi_mpi_world_dup(const char *who, MPI_Comm *comm, int *rank, int *size);
/* Initialises MPI if needed, duplicates MPI_COMM_WORLD with MPI_ERRORS_RETURN
 * into *comm and checks the job has one process per chip of w's mesh (the
 * message names `backend`).  *rank: this process's rank. */
sp_status spi_mpi_bootstrap(sp_comm_world *w, const char *backend, MPI_Comm *comm, int *rank);
/* The communicator of group g split off parent (colour: the group's first
 * member, key: the group rank), with MPI_ERRORS_RETURN, rank and size checked. */
sp_status spi_mpi_group_comm(sp_comm_world *w, MPI_Comm parent, const spi_comm_group *g, MPI_Comm *out);
/* SP_EMPI with MPI's text for rc, after aborting w (when non-NULL). */
sp_status spi_mpi_fail(sp_comm_world *w, int rc, const char *what);
/* Records that a world aborted: MPI is then not finalised at exit. */
void spi_mpi_mark_aborted(void);
#endif
