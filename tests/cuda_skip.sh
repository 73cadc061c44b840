#!/bin/sh
# cuda_skip.sh: the CUDA build runs its GPU checks only when a GPU is
# visible; otherwise it must say why.  Exits 77 (skip) without the CUDA build
# or without a GPU.
prog="${top_builddir:-.}/kernels/cuda/cuda_probe"
if test ! -x "$prog"; then
    echo "cuda_skip: SKIP: CUDA backend not built (configure found no toolkit)"
    exit 77
fi
"$prog"
