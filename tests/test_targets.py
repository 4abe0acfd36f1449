import pytest

from tileprobe.errors import UsageError
from tileprobe.targets import PROFILES, profile, resolve_target


def test_profiles_carry_the_documented_limits_and_sources():
    for name in ("rtx-pro-6000", "rtx-5090", "dgx-spark-gb10"):
        assert PROFILES[name].smem_optin == 101376
        assert PROFILES[name].smem_optin == PROFILES[name].smem_per_sm - 1024
    for name in ("b200", "h100", "h200"):
        assert PROFILES[name].smem_optin == 232448
    assert PROFILES["dgx-spark-gb10"].arch == "sm_121a" and PROFILES["rtx-5090"].arch == "sm_120a"
    assert all(p.source for p in PROFILES.values())


def test_no_gpu_means_the_offline_default_and_named_profiles():
    target, devices = resolve_target(None)
    if devices:
        pytest.skip("a GPU is visible")
    assert target.name == "rtx-pro-6000" and not target.is_device
    t, _ = resolve_target("dgx-spark-gb10")
    assert t.cc == "12.1"
    with pytest.raises(UsageError, match="unknown target"):
        profile("rtx-9090")
    with pytest.raises(UsageError, match="--gpus"):
        resolve_target(None, [3])
