"""What the path families' tests share: a cached vLLM wheel picked at random per session (`vllm_wheel`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from _session_draw import session_rng
from tileprobe.engines import locate
from tileprobe.engines.triton_configs import find_engine


@pytest.fixture(scope="module")
def vllm_wheel(request):
    wheels = sorted(p for d in locate.wheel_dirs() if d.is_dir() for p in Path(d).glob("vllm-*.whl"))
    if not wheels:
        pytest.skip("no cached vLLM wheel (tileprobe engines fetch vllm)")
    pick = session_rng(f"{request.module.__name__} wheel").choice(wheels)
    print(f"vLLM wheel {pick.name}")
    return find_engine("vllm", pick)
