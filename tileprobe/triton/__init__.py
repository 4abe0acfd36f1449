"""The Triton MoE commands beside the sweep: check-configs (audit.py) and export triton-configs (export.py)."""
