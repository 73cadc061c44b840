# exec/: runtime: communicator backends, program interpreter, reference forward.
include exec/comm.mk
include exec/ref.mk
include exec/exec.mk
