"""The model's forward pass as the engine runs it, kernel by kernel, whatever the kernel's language.

tileprobe.audit.run captures the Triton launches; this package answers the rest: the compiled kernels (CUDA
libraries the engine ships or JIT-compiles) on the path. `forward` lists the layer kinds of the model and, per
kind and phase, the kernel the engine chooses on the target (`call.KernelCall`); `families` holds one module per
compiled-kernel family plus a registry line, each answering arch, gate and bytes (`call.CompiledAnswer`); `rows`
turns the answers into the audit's rows. A call no family knows is an `unanswered` row, never an absent one.
"""
