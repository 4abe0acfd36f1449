"""A Context on a target for an engine whose pinned FlashInfer is here, else a skip naming why (the FlashInfer
families' tests)."""

from __future__ import annotations

import pytest

from tileprobe.audit.path.call import Context
from tileprobe.audit.path.families import _flashinfer
from tileprobe.backends.cutlass.build import cache_root
from tileprobe.targets import PROFILES


def flashinfer_ctx(engine_src, target: str) -> Context:
    ctx = Context(PROFILES[target], engine_src, cache_root())
    rel = _flashinfer.release(ctx)
    if isinstance(rel, str):
        pytest.skip(f"the FlashInfer release {engine_src.label()} pins is not here: {rel}")
    return ctx
