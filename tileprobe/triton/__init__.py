"""The Triton MoE commands: `sweep --family triton-moe` (sweep.py, triton-moe's part of the one sweep driver,
tileprobe.sweep), check-configs (audit.py), the pytest plugin's config-file check (check_configs.py), export
triton-configs (export.py) and its --tune (tune.py). The compiler side is tileprobe.backends.triton."""
