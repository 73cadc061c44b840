# kernels/: see Makefile.am for the layer order.
