"""The engines' kernels `tileprobe audit` sizes: the registry of audit entries (tileprobe.audit.entry.AuditKernel),
one module per engine and kernel group under tileprobe.audit.entries, each exporting ENTRIES. Adding a kernel is a
module there and one line here; no other entry's code changes.
"""

from __future__ import annotations

from dataclasses import replace

from tileprobe.audit.entries import (sglang_attention, sglang_mla, vllm_attention, vllm_gdn, vllm_gdn_mixer, vllm_mamba,
                                     vllm_mla, vllm_moe, vllm_moe_mxfp4, vllm_prefix_prefill)
from tileprobe.audit.entry import AuditKernel, Point
from tileprobe.engines import manifest
from tileprobe.errors import UsageError

MODULES = (sglang_attention, vllm_attention, vllm_prefix_prefill, sglang_mla, vllm_mla, vllm_gdn_mixer, vllm_gdn,
           vllm_mamba, vllm_moe, vllm_moe_mxfp4)
# an entry's release(s): the engine manifests that list it as walked (tileprobe/engines/manifests), not the entry's own
KERNELS: dict[str, AuditKernel] = {
    k.name: replace(k, release=manifest.entry_releases(k.engine, k.name) or "(no manifest lists it)")
    for m in MODULES for k in m.ENTRIES}

__all__ = ["AuditKernel", "ENGINES", "KERNELS", "Point", "kernels_for", "table"]

ENGINES = ("sglang", "vllm")


def kernels_for(engine: str) -> list[AuditKernel]:
    """The entries of `engine`; UsageError for an engine tileprobe does not audit or one with no entry yet."""
    if engine not in ENGINES:
        raise UsageError(f"--engine {engine}: tileprobe audits {', '.join(ENGINES)}")
    found = [k for k in KERNELS.values() if k.engine == engine]
    if not found:
        raise UsageError(f"--engine {engine}: no audited kernel yet (audited: "
                         f"{', '.join(sorted({k.engine for k in KERNELS.values()}))})")
    return found


def table() -> str:
    """The covered kernels as a markdown table, from the registry (docs/audit.md holds it; a test keeps it equal)."""
    lines = ["| entry | engine | launcher (module in the wheel) | runs when | dtype the engine runs it in |",
             "|---|---|---|---|---|"]
    for k in KERNELS.values():
        when = f"attention backend `{k.backend}`" if k.backend else "it serves the model"
        if k.chooses is not None:
            when += "; the engine's own kernel choice (else a not-selected row)"
        lines.append(f"| `{k.name}` | {k.engine} {k.release} | `{k.launcher}` (`{k.module_file}`) | {when} | "
                     f"{k.dtype_rule} |")
    return "\n".join(lines) + "\n"


def entries_of(engine: str, backend: str) -> tuple[str, ...]:
    """The audit entries an attention backend runs: those whose `backend` is it (AuditKernel.backend)."""
    return tuple(k.name for k in KERNELS.values() if k.engine == engine and k.backend == backend)
