"""tileprobe: which CUTLASS grouped-GEMM tiles fit, launch, compute correctly and run fastest on a given GPU.

Importing the package does no work: toolchains, devices and compilers are touched only when a command asks.
"""

__version__ = "0.1.0"
