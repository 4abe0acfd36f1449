import pytest

from tileprobe.errors import UsageError
from tileprobe.targets import PROFILES, child_visible_devices, profile, resolve_target


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


def test_devices_carry_their_own_name_and_a_matching_profiles_peak(monkeypatch):
    """--target rtx-pro-6000 on an RTX 5090: the GPU is returned as rtx-5090 (its rows never say rtx-pro-6000), and a
    GB10's peak bandwidth is the profile's datasheet figure, not memory clock x bus width."""
    from dataclasses import replace

    from tileprobe import targets

    fake_5090 = replace(PROFILES["rtx-5090"], name="gpu0", gpu_index=0, peak_gbps=1.0, source="cuda-python")
    fake_gb10 = replace(PROFILES["dgx-spark-gb10"], name="gpu1", gpu_index=1, peak_gbps=9999.0, source="cuda-python")
    monkeypatch.setattr(targets, "query_devices", lambda: [fake_5090, fake_gb10])
    target, devices = resolve_target("rtx-pro-6000")
    assert target.name == "rtx-pro-6000" and [d.name for d in devices] == ["rtx-5090"]
    assert devices[0].peak_gbps == PROFILES["rtx-5090"].peak_gbps
    _, devices = resolve_target(None)
    assert [d.name for d in devices] == ["rtx-5090", "dgx-spark-gb10"]
    assert devices[1].peak_gbps == PROFILES["dgx-spark-gb10"].peak_gbps == 273.0


def test_sku_device_names_resolve_to_their_profile(monkeypatch):
    """Each exact SKU name a blocklist is written for is a name a device of that profile reports: a real device with
    that name and the profile's compute capability is filed under the same profile."""
    from dataclasses import replace

    from tileprobe import targets

    for name, skus in targets.DEVICE_NAMES.items():
        assert skus and len(set(skus)) == len(skus)
        for sku in skus:
            dev = replace(PROFILES[name], name="gpu0", device_name=sku, gpu_index=0)
            assert targets._profile_name_for(dev) == name, sku
    assert len({s for skus in targets.DEVICE_NAMES.values() for s in skus}) == \
        sum(len(s) for s in targets.DEVICE_NAMES.values())
    monkeypatch.delitem(targets.DEVICE_NAMES, "h200")
    with pytest.raises(UsageError, match="h200"):
        targets.device_names("h200")
    with pytest.raises(UsageError, match="unknown target"):
        targets.device_names("rtx-9090")


def test_a_child_runs_on_this_process_device_not_the_physical_index(rng):
    # A Ray task or a Slurm job given one GPU sees it as device 0 under CUDA_VISIBLE_DEVICES=<its physical id>; its
    # harness child must get that id. (The bare index sent every such child to physical GPU 0: seen on 2x H200 with
    # --ray, both shards timed on one GPU, cooperative tiles ~2x slower.)
    physical = rng.sample(range(8), 3) + [f"GPU-{rng.getrandbits(64):016x}"]
    outer = ",".join(map(str, physical))
    for i, dev in enumerate(physical):
        assert child_visible_devices(i, {"CUDA_VISIBLE_DEVICES": outer}) == str(dev)
    assert child_visible_devices(1, {"CUDA_VISIBLE_DEVICES": f" {physical[0]} , {physical[1]} "}) == str(physical[1])
    assert child_visible_devices(2, {}) == "2"  # nothing narrowed: the index is the physical device


def test_a_longer_sku_name_is_not_filed_under_a_shorter_one():
    """'RTX 5070 Ti' contains 'RTX 5070': the longest profile name a device's name contains wins."""
    from dataclasses import replace

    from tileprobe import targets

    for name, want in (("NVIDIA GeForce RTX 5070 Ti", "rtx-5070-ti"), ("NVIDIA GeForce RTX 5070", "rtx-5070"),
                       ("NVIDIA RTX PRO 4000 Blackwell SFF Edition", "rtx-pro-4000"),
                       ("NVIDIA GeForce RTX 5070 Ti Laptop GPU", "rtx-5070-ti")):
        dev = replace(PROFILES["rtx-5090"], name="gpu0", device_name=name, gpu_index=0)
        assert targets._profile_name_for(dev) == want, name
    for name in ("rtx-5080", "rtx-5070-ti", "rtx-5070", "rtx-5060-ti", "rtx-pro-5000", "rtx-pro-4500",
                 "rtx-pro-4000"):
        p = PROFILES[name]
        assert p.arch == "sm_120a" and p.smem_optin == 101376 == p.smem_per_sm - 1024 and p.source
        assert targets.arch_of_name(targets.device_names(name)[0]) == (name, "sm_120a")
