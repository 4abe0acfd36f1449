"""The Triton backend: a kernel's source, a launch's arguments and a config become a cubin for an arch, with no GPU."""
