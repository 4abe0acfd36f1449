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
