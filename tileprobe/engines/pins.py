"""The engines' pin table: the one place tileprobe's code names serving-engine releases. Which releases tileprobe
answers for, file for file, is said by the engine manifests (tileprobe/engines/manifests/<engine>-<version>.json,
tileprobe.engines.manifest); everything else that needs a release reads it here:

- READ_FROM: per engine, the release tileprobe's re-typed pieces and stated rules were read from and checked on (the
  triton-moe launch and config lookup, the fused MoE oracle walk, the Triton rules' tables of kernel sha256, the
  CUTLASS MoE compositions): a row or a rule names its source as `label(engine)`.
- PINNED: the release a command prefers when several of an engine are here, and `tileprobe engines fetch` fetches.
- FLASHINFER_PINS: the flashinfer-python release each PINNED release requires (its wheel's METADATA), to plan a fetch
  before the wheel is here (the wheel's own pin wins once it is; tests/engines/test_fetch.py checks the table).
- TORCH_PINS: the torch release each pins; both require triton~=3.8.0 through it
  (tileprobe.backends.triton.toolchain.ENGINE_TRITON).

Adding a release that tileprobe answers for is a manifest (tools/engine_manifest.py); moving READ_FROM means the
stated rules and re-typed pieces were checked on the new release.
"""

from __future__ import annotations

READ_FROM = {"vllm": "0.33.0", "sglang": "0.5.23"}
PINNED = dict(READ_FROM)
FLASHINFER_PINS = {("vllm", "0.33.0"): "0.7.2.post1", ("sglang", "0.5.23"): "0.7.2"}
TORCH_PINS = {("vllm", "0.33.0"): "2.14.0", ("sglang", "0.5.23"): "2.14.1"}
NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


def label(engine: str) -> str:
    """'vllm <release>': the engine release a rule or a re-typed piece was read from (READ_FROM)."""
    return f"{engine} {READ_FROM[engine]}"


def labels() -> str:
    """Every engine's READ_FROM release, as a rule's scope says it ('vllm <release>, sglang <release>')."""
    return ", ".join(label(e) for e in READ_FROM)


def torch_pinning() -> str:
    """'vLLM <release> (torch <release>) and SGLang <release> (torch <release>)': who pins the Triton tileprobe
    compiles with."""
    return " and ".join(f"{NAMES[e]} {v} (torch {TORCH_PINS[(e, v)]})" for e, v in PINNED.items())
