"""A compile failure that is the same for every config is the environment's: it stops the probe, no row carries it
and nothing of it stays cached. A config's own refusal (a static_assert) stays that config's row, however many
configs share it.

The static probe is called directly, so the sweep's preflight (tests/test_preflight.py) does not catch the fault
first: the real nvcc and the real harness, with NVCC_PREPEND_FLAGS naming an option nvcc does not have (every
compile then fails at once, with the same log)."""

from __future__ import annotations

import pytest

from tileprobe.backends.cutlass import build
from tileprobe.backends.cutlass.static_probe import probe_static
from tileprobe.backends.cutlass.toolchain import find_cutlass, find_nvcc
from tileprobe.errors import EnvironmentFault
from tileprobe.families import FAMILIES, Config, parse_tile
from tileprobe.targets import profile
from tileprobe.verdict import Verdict

from _tiny_harness import write_tiny_harness

pytestmark = pytest.mark.nvcc
FAM = FAMILIES["sm120-nvfp4"]
TARGET = profile("rtx-pro-6000")


def cfg(tile: str) -> Config:
    return Config(FAM.name, parse_tile(tile, 4), "cooperative", 0, "no-c", False, "sm_120a")


def entries(cache) -> list[str]:
    return [p.name for p in cache.rglob("*") if p.is_dir() and not p.name.startswith(".")] if cache.is_dir() else []


def test_the_same_failure_for_every_config_stops_the_probe_and_is_not_cached(tmp_path, rng, monkeypatch):
    flag = f"--no-such-option-{rng.getrandbits(32):x}"
    monkeypatch.setenv("NVCC_PREPEND_FLAGS", flag)
    tiles = rng.sample(["128x128x128", "128x64x128", "128x256x128", "256x128x128", "128x128x64"], rng.choice([2, 3]))
    cache = tmp_path / "cache"
    with pytest.raises(EnvironmentFault) as info:
        probe_static([cfg(t) for t in tiles], TARGET, find_cutlass(), find_nvcc(), cache, jobs=rng.choice([1, 2]),
                     timeout_s=600)
    assert flag in info.value.what and "\n" not in info.value.what
    assert entries(cache) == []  # the first failure's entry was removed again; the second never stored

    # Two configs refused by the same static_assert (the tiny harness refuses one tile M) are two compile-error
    # rows: a config's own refusal is never taken for the environment's.
    monkeypatch.delenv("NVCC_PREPEND_FLAGS")
    m = rng.choice([64, 256])
    monkeypatch.setattr(build, "HARNESS_DIR", write_tiny_harness(tmp_path / "tiny", refuse_m=m))
    bad = [cfg(f"{m}x128x128"), cfg(f"{m}x256x128")]
    out = probe_static(bad, TARGET, find_cutlass(), find_nvcc(), tmp_path / "cache", jobs=1, timeout_s=600)
    assert [o.verdict for o in out] == [Verdict.COMPILE_ERROR] * 2
    assert all("this tile M does not build" in o.log for o in out)
