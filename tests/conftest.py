import os
import random
import shutil
from pathlib import Path

import pytest

from tileprobe.backends.cutlass.toolchain import find_cutlass, find_nvcc


# pytester: tests/test_pytest_plugin.py runs the tileprobe plugin in throwaway pytest sessions. The plugin itself
# (--tileprobe-known-good) is loaded from its pytest11 entry point once tileprobe is installed.
pytest_plugins = ["pytester"]


def _has_gpu() -> bool:
    try:
        from tileprobe.targets import query_devices

        return bool(query_devices())
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and driver")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def toolchain(tmp_path_factory):
    """The real nvcc and CUTLASS (CI has both: nvcc on PATH, CUTLASS inside the pinned flashinfer wheel)."""
    from tileprobe.sweep import Toolchain

    cache = Path(os.environ.get("TILEPROBE_TEST_CACHE") or tmp_path_factory.mktemp("tpcache"))
    return Toolchain(find_cutlass(), find_nvcc(), cache)


@pytest.fixture
def rng():
    seed = random.randrange(2**32)
    print(f"random seed {seed}")
    return random.Random(seed)


@pytest.fixture
def nvcc_path():
    path = shutil.which("nvcc")
    assert path, "nvcc must be on PATH for these tests"
    return path
