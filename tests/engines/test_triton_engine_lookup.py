"""tileprobe's statement of which Triton fused-MoE config vLLM / SGLang load equals the engines' own code.

The engines' functions (get_config_file_name, get_moe_configs, get_default_config, try_get_optimal_moe_config,
and the device-name helpers) are cut from their source (the installed engine or its wheel: $TILEPROBE_ENGINE_WHEELS)
and run with stand-ins answering as each target would (tests/_engine_exec.py); never imported. Skipped when neither
the engine nor a wheel of it is on the machine.
"""

from __future__ import annotations

import json
import random

import pytest

from _engine_exec import sglang_namespace, unpack_configs, vllm_namespace
from tileprobe.engines import sglang, vllm
from tileprobe.engines import triton_configs as tc
from tileprobe.engines import triton_lookup as tl
from tileprobe.errors import UsageError
from tileprobe.targets import DEVICE_NAMES, PROFILES
from tileprobe.workloads import PRESETS

MODS = {"vllm": vllm, "sglang": sglang}
TARGETS = [t for t in DEVICE_NAMES if t in PROFILES]


def _source(engine: str) -> tc.EngineSource:
    try:
        return tc.find_engine(engine)
    except UsageError as exc:
        pytest.skip(f"no {engine}: {exc}")


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def engine(request, tmp_path_factory):
    src = _source(request.param)
    mod = MODS[request.param]
    root = unpack_configs(src, mod.CONFIGS_DIR, tmp_path_factory.mktemp(f"{request.param}-tree"))
    return request.param, src, root, tc.read_source_tree(src, mod.CONFIGS_DIR)


def _random_entry(rng: random.Random, block_shape) -> dict:
    e = {"BLOCK_SIZE_M": rng.choice([16, 32, 64, 128]), "BLOCK_SIZE_N": rng.choice([32, 64, 128, 256]),
         "BLOCK_SIZE_K": rng.choice([64, 128, 256]) if not block_shape else block_shape[1],
         "GROUP_SIZE_M": rng.choice([1, 16, 32, 64]), "num_warps": rng.choice([4, 8]),
         "num_stages": rng.choice([2, 3, 4, 5])}
    if rng.random() < 0.3:
        e["USE_TMA"] = rng.random() < 0.5
    return e


def _random_file(rng: random.Random, block_shape) -> dict:
    """Batch-size keys in a random order, with ties possible (the nearest-key rule's tie goes to file order)."""
    keys = rng.sample([1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024], rng.randint(1, 8))
    return {str(k): _random_entry(rng, block_shape) for k in keys}


def _ms(rng: random.Random, hi: int) -> list[int]:
    return sorted({1, 2, 3, 4, 5, 8, 9, 12, 16, 17, 32, 33, 64, 65, 96, 97, 128, 129, 512, 513, hi}
                  | {rng.randint(1, hi) for _ in range(12)})


def _problems(files: list[tc.ConfigFile], scheme: tc.Scheme, rng: random.Random, fdevs: set[str]) -> list[tuple]:
    """(E, N, K, topk): every shipped (E, N) of this scheme for one of the grid's devices, a sample of the rest, and
    two presets; K and topk from a preset (the lookup keys on E and N only; the default heuristic reads E and M)."""
    on_device = sorted({(f.name.E, f.name.N) for f in files
                        if tc.scheme_of(f.name) == scheme and f.name.device_name in fdevs})
    others = sorted({(f.name.E, f.name.N) for f in files if tc.scheme_of(f.name) == scheme})
    pairs = rng.sample(on_device, min(6, len(on_device))) + rng.sample(others, min(3, len(others)))
    presets = [PRESETS[n] for n in rng.sample(sorted(PRESETS), 2)]
    pairs += [(p.experts, p.inter) for p in presets]
    out = []
    for E, N in dict.fromkeys(pairs):
        p = rng.choice(list(PRESETS.values()))
        out.append((E, N, p.hidden, p.top_k))
    return out


def _engine_configs(engine: str, ns: dict, E, N, K, topk, scheme: tc.Scheme, M: int):
    """The engine's own answer for the gate_up and down GEMMs of one fused_experts call."""
    bs = list(scheme.block_shape) if scheme.block_shape else None
    if engine == "vllm":
        cfg = ns["try_get_optimal_moe_config"]((E, 2 * N, K), (E, K, N), topk, scheme.dtype, M, block_shape=bs)
        return cfg, cfg
    cfg, (down, _) = ns["try_get_optimal_moe_config"]((E, 2 * N, K), (E, K, N), topk, scheme.dtype, M,
                                                      is_marlin=False, block_shape=bs,
                                                      per_channel_quant=scheme.per_channel, return_down_config=True)
    return cfg, (down or cfg)


def _at(ps: list[tl.Pick], gemm: str, m: int) -> tl.Pick:
    hits = [p for p in ps if p.gemm == gemm and p.m_lo <= m and (p.m_hi is None or m <= p.m_hi)]
    assert len(hits) == 1, (gemm, m, hits)
    return hits[0]


def _namespace(engine, src, root, name, target, user_dir=None):
    if engine == "vllm":
        return vllm_namespace(src, root, name, user_dir)
    cc = tuple(int(x) for x in target.cc.split("."))
    return sglang_namespace(src, root, name, target.smem_optin, target.sms, cc)


def _compare(engine, src, ns, target, name, problems, schemes, rng, user_dir=None, monkeypatch=None, sources=None):
    """`sources`, when given, gets the source of every pick at M 1..4 (the picks are made from M = 1 upward, so
    those are exactly the picks of max_m=4)."""
    checked = 0
    for scheme in schemes:
        for E, N, K, topk in problems:
            ms = _ms(rng, 1100)
            ps = tl.picks(engine, src, E, N, K, topk, scheme, target, name, user_dir, max_m=max(ms))
            if sources is not None:
                sources |= {p.source for p in ps if p.m_lo <= 4}
            for m in ms:
                up, down = _engine_configs(engine, ns, E, N, K, topk, scheme, m)
                assert _at(ps, "gate_up", m).config == up, (engine, name, scheme.name, E, N, m)
                assert _at(ps, "down", m).config == down, (engine, name, scheme.name, E, N, m)
                checked += 1
    return checked


def test_device_file_names_are_the_engines_own(engine):
    name, src, root, _ = engine
    mod = MODS[name]
    for t in TARGETS:
        for dev in DEVICE_NAMES[t]:
            ns = _namespace(name, src, root, dev, PROFILES[t])
            for scheme in tc.SCHEMES.values():
                bs = list(scheme.block_shape) if scheme.block_shape else None
                if name == "vllm":
                    theirs = ns["get_config_file_name"](128, 768, scheme.dtype, bs)
                    ours = mod.config_file_name(128, 768, scheme, dev)
                    assert theirs == ours
                else:
                    for down in (False, True):
                        theirs = ns["get_config_file_name"](128, 768, scheme.dtype, bs or [0, 0],
                                                            scheme.per_channel, down)
                        assert theirs == mod.config_file_name(128, 768, scheme, dev, down)


def test_shipped_lookup_and_default_match_the_engine(engine, rng):
    """No user folder: the shipped file for the exact device name, else the default heuristic, for every target."""
    name, src, root, files = engine
    fdevs = {MODS[name].device_file_name(d) for t in TARGETS for d in DEVICE_NAMES[t]}
    problems = {s.name: _problems(files, s, rng, fdevs) for s in tc.SCHEMES.values()}
    checked = sources = 0
    seen = set()
    for t in TARGETS:
        target = PROFILES[t]
        for dev in DEVICE_NAMES[t]:
            ns = _namespace(name, src, root, dev, target)
            for s in tc.SCHEMES.values():
                # the sources seen at M <= 4 come from the picks _compare makes (a second tl.picks per problem with
                # max_m=4 gave the same picks again: half of this test's time)
                checked += _compare(name, src, ns, target, dev, problems[s.name], [s], rng, sources=seen)
    sources = len(seen)
    assert checked > 500 and {"shipped", "default"} <= seen, (checked, seen, sources)


def test_user_folder_lookup_matches_the_engine(engine, rng, tmp_path, monkeypatch):
    """A user's folder: vLLM's VLLM_TUNED_CONFIG_FOLDER beside the shipped files; SGLang's SGLANG_MOE_CONFIG_DIR with
    its configs/triton_X_Y_Z layout, the newest-first fallback to other triton_* folders, and _down files."""
    name, src, root, files = engine
    mod = MODS[name]
    target = PROFILES[rng.choice(TARGETS)]
    dev = rng.choice(DEVICE_NAMES[target.name])
    schemes = list(tc.SCHEMES.values())
    problems = [(rng.choice([8, 64, 128, 256]), rng.choice([256, 512, 768, 1024, 1536]), 4096, 8) for _ in range(4)]
    user = tmp_path / "user"
    for i, (E, N, _, _) in enumerate(problems):
        for s in schemes:
            if rng.random() < 0.35:
                continue
            bs = s.block_shape
            if name == "vllm":
                path = user / mod.config_file_name(E, N, s, dev)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(_random_file(rng, bs)))
            else:
                for down in (False, True):
                    if down and rng.random() < 0.5:
                        continue
                    folder = rng.choice(["triton_3_8_0", "triton_3_7_1", "triton_3_10_0", "triton_3_2_0"])
                    path = user / "configs" / folder / mod.config_file_name(E, N, s, dev, down)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps(_random_file(rng, bs)))
    user.mkdir(exist_ok=True)
    if name == "sglang":
        (user / "configs").mkdir(exist_ok=True)
        monkeypatch.setenv(sglang.USER_ENV, str(user))
    ns = _namespace(name, src, root, dev, target, str(user))
    checked = _compare(name, src, ns, target, dev, problems, schemes, rng, str(user))
    used = {p.source for E, N, K, k in problems for s in schemes
            for p in tl.picks(name, src, E, N, K, k, s, target, dev, str(user), max_m=8)}
    assert checked > 50 and "user" in used, used


def test_sglang_config_dir_without_configs_folder_is_the_engines_error(tmp_path, monkeypatch):
    """SGLANG_MOE_CONFIG_DIR set to a folder with no configs/: the engine's os.listdir raises; tileprobe says so."""
    src = _source("sglang")
    monkeypatch.setenv(sglang.USER_ENV, str(tmp_path))
    target = PROFILES["rtx-pro-6000"]
    dev = DEVICE_NAMES["rtx-pro-6000"][0]
    ns = sglang_namespace(src, tmp_path, dev, target.smem_optin, target.sms, (12, 0))
    with pytest.raises(FileNotFoundError):
        ns["try_get_optimal_moe_config"]((128, 1536, 2048), (128, 2048, 768), 8, None, 4, return_down_config=True)
    ps = tl.picks("sglang", src, 128, 768, 2048, 8, tc.scheme("bf16"), target, dev, str(tmp_path), max_m=4)
    assert {p.source for p in ps} == {"engine-error"} and "FileNotFoundError" in ps[0].note
