"""The audit entries, one module per engine and kernel group (each exports ENTRIES); tileprobe.audit.kernels lists them.

An entry names no engine release: its `release` is LISTED, and the registry (tileprobe.audit.kernels) fills in the
releases whose engine manifest lists the entry as walked (tileprobe.engines.manifest.entry_releases).
"""

LISTED = "(the releases whose manifest lists it)"
