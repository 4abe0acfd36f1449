"""Config identity rebuilt from a row's key or a known-good entry: every field, stages as configured."""

import pytest

from tileprobe.errors import UsageError
from tileprobe.families import FAMILIES, expand_configs
from tileprobe.results.rows import Outcome, StaticInfo, make_row
from tileprobe.targets import profile
from tileprobe.verdict import Verdict
from tileprobe.results.resultset import config_from_entry, config_from_row, legacy_config_key, stages_text


def test_config_round_trips_through_its_row_fields(rng):
    """A row stores the config as explicit fields; the config is rebuilt from them, never from the key."""
    target = profile("rtx-pro-6000")
    for _ in range(40):
        name = rng.choice([n for n, f in FAMILIES.items() if f.expand is None])
        fam = FAMILIES[name]
        tiles = rng.sample(list(fam.default_tiles), rng.randint(1, 3))
        stages = rng.sample([0, 1, 2, 3, 4, 7, 12], rng.randint(1, 3))
        configs = expand_configs(fam, rng.choice(fam.archs), tiles, list(fam.schedules), stages,
                                 ["no-c", "with-c"], [False, True])
        for c in rng.sample(configs, min(5, len(configs))):
            # the row's stages column holds the *resolved* count; it must not leak into the identity
            info = StaticInfo(stages=rng.randint(1, 9), smem_bytes=rng.randrange(50000, 120000))
            row = make_row(c, target, {}, Outcome(c, Verdict.FITS, "x", info))
            row["config"] = "renamed-by-someone"  # the name is derived, never parsed back
            back = config_from_row(row)
            assert back == c and back.unsupported_reason == c.unsupported_reason
            entry = dict(c.fields(), stages=c.stages_label if c.stages == 0 else c.stages)
            assert config_from_entry(entry) == c


def test_legacy_rows_without_stages_configured_still_load():
    auto = {"config": "sm120_nvfp4_128x128x128_coop_sauto_noc_noswap_sm_120a", "stages": 4, "family": "sm120-nvfp4",
            "tile": "128x128x128", "schedule": "cooperative", "epilogue": "no-c", "swap_ab": False, "arch": "sm_120a"}
    fixed = dict(auto, config="sm120_nvfp4_128x128x128_coop_s3_noc_noswap_sm_120a", stages=3)
    assert stages_text(auto) == "auto→4" and stages_text(fixed) == "3"
    assert config_from_row(auto).stages == 0 and config_from_row(fixed).stages == 3
    assert legacy_config_key(fixed["config"])["stages"] == 3


@pytest.mark.parametrize("key", ["", "sm120_nvfp4_128x128_coop_sauto_noc_noswap_sm_120a",
                                 "sm100_x_128x128x128_coop_sauto_noc_noswap_sm_100a",
                                 "sm120_nvfp4_128x128x128_warp_sauto_noc_noswap_sm_120a",
                                 ])
def test_bad_legacy_keys_are_usage_errors(key):
    with pytest.raises(UsageError):
        config_from_row({"config": key, "family": "sm120-nvfp4", "tile": "128x128x128", "schedule": "cooperative",
                         "epilogue": "no-c", "arch": "sm_120a"})


def test_entry_needs_every_field():
    with pytest.raises(UsageError, match="lacks stages"):
        config_from_entry({"family": "sm120-nvfp4", "tile": "128x128x128", "schedule": "cooperative",
                           "epilogue": "no-c", "swap_ab": False, "arch": "sm_120a"})
    with pytest.raises(UsageError, match="out of range"):
        config_from_entry({"family": "sm120-nvfp4", "tile": "128x128x128", "schedule": "cooperative", "stages": 40,
                           "epilogue": "no-c", "swap_ab": False, "arch": "sm_120a"})
