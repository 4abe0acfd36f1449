"""The audit entries, one module per engine and kernel group (each exports ENTRIES); tileprobe.audit.kernels lists them."""
