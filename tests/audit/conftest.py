"""The engine wheels the audit tests read (tileprobe's wheel cache; tests/conftest.py fetches them for triton tests):
`sglang` and `vllm`, once per test module, or a clean skip naming why. A test that picks its engine at run time asks
for it by name: `request.getfixturevalue(engine)`."""

from __future__ import annotations

import pytest

from tileprobe.engines.triton_configs import find_engine
from tileprobe.errors import UsageError


def _engine_or_skip(name: str):
    try:
        return find_engine(name)
    except UsageError as exc:
        pytest.skip(f"no {name} wheel: {exc}")


@pytest.fixture(scope="module")
def sglang():
    return _engine_or_skip("sglang")


@pytest.fixture(scope="module")
def vllm():
    return _engine_or_skip("vllm")
