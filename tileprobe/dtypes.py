"""Operand pairs of the engine families and the width of their elements: one definition, read by the family
(tile K bytes, bytes moved), the model (tileprobe.predict) and the engine reader. Standard library only."""

from __future__ import annotations

# Activation (A before any swap) and weight (B) element widths in bits. Engine tactic names spell tile K in bytes
# of the activation type; MXFP8 x MXFP4 has 8-bit activations and 4-bit weights.
ACT_BITS = {"nvfp4xnvfp4": 4, "mxfp8xmxfp4": 8, "fp8xfp8": 8}
WEIGHT_BITS = {"nvfp4xnvfp4": 4, "mxfp8xmxfp4": 4, "fp8xfp8": 8}
# Elements along K per one-byte scale factor (0: no block scales): NVFP4 ue4m3 per 16, MX ue8m0 per 32.
SF_VECTOR = {"nvfp4xnvfp4": 16, "mxfp8xmxfp4": 32, "fp8xfp8": 0}
