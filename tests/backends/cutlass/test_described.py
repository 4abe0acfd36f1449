"""Sizes kept per config (tileprobe/backends/cutlass/described.py): a config sized in one batch is not compiled again
in another, the record is the config's own build's description, and a broken record is sized again."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace

import pytest

from tileprobe.backends.cutlass import build, described, static_probe
from tileprobe.backends.cutlass.build import BuildRequest
from tileprobe.backends.cutlass.static_probe import probe_static
from tileprobe.families import Config, parse_tile
from tileprobe.targets import profile

from _session_draw import DESCRIBED_FIRST, static_probe_unit
from _tiny_harness import tiny_smem_bytes, write_tiny_harness

pytestmark = pytest.mark.nvcc
TARGET = profile("rtx-pro-6000")
TILES = ["128x128x128", "128x64x128", "128x256x128", "256x128x128", "128x32x128", "64x128x128", "64x256x128"]


def cfg(tile: str, stages: int = 0, epilogue: str = "no-c") -> Config:
    return Config("sm120-nvfp4", parse_tile(tile, 4), "cooperative", stages, epilogue, False, "sm_120a")


@pytest.fixture
def built(monkeypatch):
    """Every BuildRequest probe_static hands to build_many (the real one still builds them)."""
    seen: list[BuildRequest] = []
    real = static_probe.build_many

    def spy(requests, *args, **kwargs):
        seen.extend(requests)
        return real(requests, *args, **kwargs)

    monkeypatch.setattr(static_probe, "build_many", spy)
    return seen


def test_a_config_sized_in_one_batch_is_not_compiled_in_another(toolchain, tmp_path, rng, monkeypatch, built,
                                                                 capsys):
    """The subject is the record's lifecycle, not CUTLASS: the real nvcc builds the tiny describe harness
    (tests/_tiny_harness.py) into this test's own cache. A first sweep sizes its configs in one batch; a second of
    two of them plus a new one compiles the new one only and gives the kept two the first build's rows (its share of
    the seconds, its number of configs); a broken or foreign record is one warning line and sized again; `rebuild`
    sizes everything."""
    monkeypatch.setattr(build, "HARNESS_DIR", write_tiny_harness(tmp_path / "tiny"))
    cache = tmp_path / "cache"
    tiles = rng.sample(TILES, 5)
    first = [cfg(t, rng.choice([0, 2, 3]), rng.choice(["no-c", "with-c"])) for t in tiles[:3]]
    outs = probe_static(first, TARGET, toolchain.cutlass, toolchain.nvcc, cache, 1, 1200)
    assert [r.configs for r in built] == [tuple(first)]
    assert [o.info.smem_bytes for o in outs] == [tiny_smem_bytes(c.tile.m, c.tile.n, c.tile.k) for c in first]
    for c, o in zip(first, outs):
        kept = described.load(cache, c, toolchain.cutlass, toolchain.nvcc)
        assert kept and kept.desc["smem_bytes"] == o.info.smem_bytes and kept.desc["index"] == 0
        assert (kept.configs, kept.seconds) == (3, o.info.compile_seconds) and (cache / kept.build).is_dir()

    new = cfg(tiles[3])
    again = rng.sample(first, 2) + [new]
    built.clear()
    outs2 = probe_static(again, TARGET, toolchain.cutlass, toolchain.nvcc, cache, 1, 1200)
    assert [r.configs for r in built] == [(new,)]  # only the config no build has sized
    by_key = {o.config.key: o for o in outs}
    for c, o in zip(again, outs2):
        assert o.info.smem_bytes == tiny_smem_bytes(c.tile.m, c.tile.n, c.tile.k)
        if c is not new:
            assert o.info == by_key[c.key].info and o.verdict == by_key[c.key].verdict
    assert outs2[-1].info.compile_configs == 1

    # A truncated record, and one that holds another config's description: each one warning line, sized again.
    broken, foreign = again[0], again[1]
    p_broken = described.entry(cache, broken, toolchain.cutlass, toolchain.nvcc)
    p_broken.write_text(p_broken.read_text()[:20])
    p_foreign = described.entry(cache, foreign, toolchain.cutlass, toolchain.nvcc)
    p_foreign.write_text(described.entry(cache, new, toolchain.cutlass, toolchain.nvcc).read_text())
    built.clear()
    capsys.readouterr()
    outs3 = probe_static([broken, foreign], TARGET, toolchain.cutlass, toolchain.nvcc, cache, 1, 1200)
    err = capsys.readouterr().err
    assert err.count("warning: sizes record") == 2 and p_broken.name in err and p_foreign.name in err, err
    assert [r.configs for r in built] == [(broken, foreign)]
    assert [o.info.smem_bytes for o in outs3] == [tiny_smem_bytes(c.tile.m, c.tile.n, c.tile.k)
                                                  for c in (broken, foreign)]
    assert json.loads(p_foreign.read_text())["config"] == foreign.name

    built.clear()
    probe_static(again, TARGET, toolchain.cutlass, toolchain.nvcc, cache, 1, 1200, rebuild=True)
    assert sorted(c.key for r in built for c in r.configs) == sorted(c.key for c in again)


def test_configs_of_two_archs_are_sized_in_units_of_one_arch(toolchain, tmp_path, rng, monkeypatch, built):
    """One probe_static call with sm_120a and sm_121a configs mixed at random: every unit it builds is one family and
    arch (a unit is compiled with one arch's flags), each config's kept record names a build of its own arch, and a
    unit of two archs cannot be asked for."""
    monkeypatch.setattr(build, "HARNESS_DIR", write_tiny_harness(tmp_path / "tiny"))
    tiles = rng.sample(TILES, 4)
    archs = ["sm_120a", "sm_121a"] + [rng.choice(["sm_120a", "sm_121a"]) for _ in tiles[2:]]
    rng.shuffle(archs)
    mixed = [replace(cfg(t), arch=a) for t, a in zip(tiles, archs)]
    outs = probe_static(mixed, TARGET, toolchain.cutlass, toolchain.nvcc, tmp_path / "cache", 1, 1200)
    assert [o.config for o in outs] == mixed and all(o.info.smem_bytes for o in outs)
    assert built and all(len({c.arch for c in r.configs}) == 1 for r in built), [r.configs for r in built]
    for c in mixed:
        kept = described.load(tmp_path / "cache", c, toolchain.cutlass, toolchain.nvcc)
        assert kept and c.arch in kept.build and ({"sm_120a", "sm_121a"} - {c.arch}).pop() not in kept.build, \
            (c.arch, kept.build)
    with pytest.raises(ValueError, match="one family and arch"):
        BuildRequest("describe", tuple(mixed), with_device=False)


def test_a_batchs_record_is_what_the_configs_own_build_prints(toolchain):
    """Real CUTLASS: what a batch's harness prints for a config is exactly what that config's own single-config sizes
    build prints, index aside (the claim a kept record rests on), and the kept record is that description. The
    batch: the static probe's unit of random configs, the session's draw (tests/_session_draw.py: test_static_probe.py
    probes the very same unit, so whichever runs first compiles it and the other is served it), which holds the
    family's first config at a random place (the wheel test sizes that config alone: its own build is shared through
    the session cache)."""
    first = cfg(DESCRIBED_FIRST)
    batch = tuple(static_probe_unit()["unit"])

    def printed(configs: tuple[Config, ...]) -> list[dict]:
        res = build.build(BuildRequest("describe", configs, with_device=False), toolchain.cutlass, toolchain.nvcc,
                          toolchain.cache, 1800)
        assert res.ok, res.log[-2000:]
        out = subprocess.run([str(res.binary)], capture_output=True, text=True, timeout=60).stdout
        return [json.loads(line) for line in out.splitlines()]

    printed_batch, (own,) = printed(batch), printed((first,))
    i = batch.index(first)
    assert [d["index"] for d in printed_batch] == list(range(len(batch))) and own["index"] == 0
    assert dict(printed_batch[i], index=0) == own
    assert all(d["kernel_type"] != own["kernel_type"] for j, d in enumerate(printed_batch) if j != i)
    assert own["kernel_type"].startswith("N7cutlass4gemm6kernel13GemmUniversal"), own
    probe_static(list(batch), TARGET, toolchain.cutlass, toolchain.nvcc, toolchain.cache, 1, 1800)
    kept = described.load(toolchain.cache, first, toolchain.cutlass, toolchain.nvcc)
    assert kept is not None and kept.desc == own, (kept, own)
