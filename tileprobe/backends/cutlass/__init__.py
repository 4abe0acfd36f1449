"""The nvcc/CUTLASS backend: toolchain discovery, builds and their cache, the static probe, isolated harness runs, timing."""
