"""Random draws made once per test session, the same in every xdist worker, so that tests in different files can
draw the same random config and share its build through the session's build cache (tests/conftest.py) instead of
each compiling its own. The seed is new each run (pytest_configure draws it before the workers start, and they
inherit it), printed with every draw, and TILEPROBE_TEST_SEED=<seed> repeats a run's draws."""

from __future__ import annotations

import os
import random

ENV = "TILEPROBE_TEST_SEED"


def session_seed() -> str:
    if not os.environ.get(ENV):  # pytest_configure sets it; a run without the conftest draws one here
        os.environ[ENV] = str(random.randrange(2**32))
    return os.environ[ENV]


def session_rng(name: str) -> random.Random:
    """The session's random stream `name`: the same draws wherever it is asked for in this run."""
    seed = session_seed()
    print(f"session random seed {seed} ({ENV}={seed} repeats it), stream {name!r}")
    return random.Random(f"{seed}/{name}")


# tests/predict/test_modeled.py sweeps one sm120-nvfp4 tile and schedule with both epilogues; the static probe's
# module unit (tests/backends/cutlass/test_static_probe.py) sizes the same two configs, so the sweep finds them sized
# (described.py: a config sized in any unit is not compiled again) when that unit was built first in the session.
MODELED_TILES = ["128x64x128", "128x128x128", "128x256x64B", "256x128x128"]


def modeled_tile_and_schedule() -> tuple[str, str]:
    rng = session_rng("sm120-nvfp4 compiled rows")
    return rng.choice(MODELED_TILES), rng.choice(["cooperative", "pingpong"])


# The static probe's module unit of sm120-nvfp4 configs (tests/backends/cutlass/test_static_probe.py), which
# tests/backends/cutlass/test_described.py builds as its batch: whichever of the two runs first in the session
# compiles it, and the other is served the same build (a config sized in any unit is not compiled again).
def nvfp4_config(tile: str, stages: int = 0, schedule: str = "cooperative", epilogue: str = "no-c"):
    from tileprobe.families import Config, parse_tile

    return Config("sm120-nvfp4", parse_tile(tile, 4), schedule, stages, epilogue, False, "sm_120a")


def nvfp4_stage_bytes(m: int, n: int, k: int) -> int:
    """One pipeline stage of the SM120 NVFP4 mainloop, from first principles: A and B tiles of e2m1 (half a byte
    each) plus ue4m3 scale factors (one byte per 16 elements of K) for at least one 128-row atom of A and of B."""
    return (m + n) * k // 2 + (max(m, 128) + max(n, 128)) * k // 16


def static_probe_unit() -> dict:
    """Three random default tiles (cooperative, no C, automatic stages); one of them (`pick`) again with 2 and 3
    stages, with a stage count that overfills the RTX PRO 6000's 101376 B (`over`) and with the C-source epilogue;
    then, those the unit does not already hold: test_modeled's two configs, and the broken tile of
    tests/results/test_known_good.py's broken copy and tests/test_pytest_plugin.py's broken file (128x256x128 with
    4 stages, which cannot fit), which those checks are then served instead of compiling a unit for it, and the
    two-stage build of test_static_probe's carveout test (256x256xK with 2 stages: the bytes the probe puts on a
    tile whose automatic carveout has no room for two; the tile's own automatic build, which fails, is that test's).
    `probe` is that list; `unit` is it with test_described's config (the family's first, 128x128x128) at a random
    place, unless it is there already: the very unit both tests build, so that even when they run at the same time
    one compiles it and the other waits for it (the build cache's check, lock, check)."""
    from tileprobe.families import FAMILIES, parse_tile
    from tileprobe.targets import profile

    rng = session_rng("sm120-nvfp4 static probe unit")
    tiles = rng.sample(list(FAMILIES["sm120-nvfp4"].default_tiles), 3)
    pick = rng.choice(tiles)
    t = parse_tile(pick, 4)
    # Enough stages to overfill 101376 B whatever the fixed part is (the fixed part is under 16 KiB).
    over = profile("rtx-pro-6000").smem_optin // nvfp4_stage_bytes(t.m, t.n, t.k) + 1
    cfg = nvfp4_config
    configs = [cfg(x) for x in tiles] + [cfg(pick, 2), cfg(pick, 3), cfg(pick, over), cfg(pick, epilogue="with-c")]
    tile, sched = modeled_tile_and_schedule()
    for c in (cfg(tile, schedule=sched), cfg(tile, schedule=sched, epilogue="with-c"), cfg("128x256x128", 4),
              cfg(f"256x256x{carveout_k()}", 2)):
        if c not in configs:
            configs.append(c)
    unit = list(configs)
    if cfg(DESCRIBED_FIRST) not in unit:
        unit.insert(rng.randrange(len(unit) + 1), cfg(DESCRIBED_FIRST))
    return {"tiles": tiles, "pick": pick, "over": over, "probe": configs, "unit": unit}


DESCRIBED_FIRST = "128x128x128"  # test_described's config: the family's first, which the wheel test sizes alone


def carveout_k() -> int:
    """K of test_static_probe's 256x256xK tile whose automatic carveout has no room for two stages."""
    return session_rng("sm120-nvfp4 carveout").choice([512, 1024])


# The SM120 family's two arch-specific builds: sm_120a (RTX 5090, RTX PRO 6000 and the other SM120 GPUs) and sm_121a
# (DGX Spark). tileprobe builds the same sources for both with only the gencode changed, so a proof that compiles
# each of them proves the same thing twice over. A session builds one, drawn here for every test that makes that
# choice (the committed known-good files of tests/results/test_known_good.py, the sm_121a variant of
# tests/engines/test_engine_flashinfer.py's identity proof), printed with the seed; TILEPROBE_TEST_EVERY_ARCH=1 builds
# both.
EVERY_ARCH_ENV = "TILEPROBE_TEST_EVERY_ARCH"
SM120_ARCHS = ("sm_120a", "sm_121a")


def sm120_archs() -> tuple[str, ...]:
    """The SM120-family arch(s) this session builds: one drawn, or both with TILEPROBE_TEST_EVERY_ARCH=1."""
    if os.environ.get(EVERY_ARCH_ENV) == "1":
        return SM120_ARCHS
    return (session_rng("sm120 family arch").choice(SM120_ARCHS),)
