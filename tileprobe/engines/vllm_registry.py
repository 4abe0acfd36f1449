"""vLLM's own model registry as the audit asks it: does this release load the model's architecture at all?

vLLM keeps the architectures it dropped in `_PREVIOUSLY_SUPPORTED_MODELS` (vllm/model_executor/models/registry.py:
architecture -> the last release that loaded it) and refuses them when a model is loaded ("Model architecture X was
supported in vLLM until vY, and is not supported anymore"). The dict is read from the wheel's own text (a literal,
never imported), with the line of the test that raises, so the audit says no before sizing a model the engine will
not run (MiniMax-Text-01 / MiniMax-M1 since v0.23.0: their linear-attention kernels still ship).
"""

from __future__ import annotations

import ast

from tileprobe.engines.triton_configs import EngineSource

REGISTRY = "vllm/model_executor/models/registry.py"
RETIRED = "_PREVIOUSLY_SUPPORTED_MODELS"


def retired(source: EngineSource, architecture: str) -> tuple[str, str] | None:
    """(the last vLLM release that loaded `architecture`, the registry line that refuses it) when this release's
    registry lists it as no longer supported; None when it does not (or the release has no such list)."""
    tree = ast.parse(source.read_text(REGISTRY))
    table, line = None, None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == RETIRED for t in targets) and node.value is not None:
                table = ast.literal_eval(node.value)
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and any(isinstance(c, ast.Name) and c.id == RETIRED for c in node.test.comparators)):
            line = line or node.lineno
    if not table or architecture not in table:
        return None
    return str(table[architecture]), f"{REGISTRY}:{line}" if line else REGISTRY
