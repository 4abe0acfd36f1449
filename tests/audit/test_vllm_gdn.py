"""tileprobe.audit.entries.vllm_gdn: vLLM's gated-delta-net step (the GDN metadata builder, then the layer's own
_forward_core, tileprobe.audit.vllm_gdn_step), run from the wheel under the stand-in device, makes launches whose compiled bytes are Triton's own for the engine's own kernel objects; the prefill entry's
`chooses` (vLLM's own _resolve_gdn_prefill_backend, run under the session) agrees with the engine line it names,
evaluated here from the wheel's text; the entries refuse a model without GDN layers. Inputs are random per run."""

from __future__ import annotations

import ast
import re
from dataclasses import replace

import pytest
from _engine_own import answered, captured, tritons_own

from tileprobe.audit import capture, jobs, kernels, loader, run
from tileprobe.audit.entries import vllm_gdn
from tileprobe.errors import UsageError
from tileprobe.models import ATTENTION_PRESETS, AttentionConfig, GatedDeltaDims
from tileprobe.targets import profile

pytestmark = pytest.mark.triton

GDN = sorted(k.name for k in vllm_gdn.ENTRIES)
TARGETS = ("rtx-pro-6000", "h200")
STEP = "vllm-gdn"
CHUNK_FILES = ("cumsum.py", "chunk_scaled_dot_kkt.py", "solve_tril.py", "wy_fast.py", "chunk_delta_h.py",
               "chunk_o.py")


def _model(rng, key_head_dim=None) -> AttentionConfig:
    kh = rng.choice([1, 2, 4, 8, 16])
    k = key_head_dim or rng.choice([64, 128])
    # the value head size equals the key's, as in every GDN config (Qwen3-Next, Qwen3.5: 128 / 128):
    # fused_post_conv_prep's kernel does not compile for unequal sizes (its mask_2d's shape differs by branch)
    dims = GatedDeltaDims(kh, kh * rng.choice([1, 2, 4]), k, k, 4)
    return AttentionConfig("m", 16, 2, 256, rng.choice(["bf16", "fp16"]), model_type="qwen3_next",
                           layer_types=("linear_attention", "full_attention"), gdn=dims)


def _point(rng, model, phase: str) -> kernels.Point:
    tp = rng.choice([t for t in (1, 2, 4) if model.gdn.key_heads % t == 0])
    decode = phase == "decode"
    return kernels.Point(rng.randint(2, 64) if phase != "prefill" else rng.randint(1, 4),
                         rng.randint(17, 1500), tp, None, phase)


def _triton_prefill_model(rng):
    """A model whose prefill the engine runs on Triton on sm_120 (head_k_dim 64); on sm_90 its selector picks
    FlashInfer's GDN prefill whatever the head size."""
    return _model(rng, 64)


@pytest.mark.parametrize("phase", ("prefill", "decode", "mixed"))
def test_gdn_launches_compile_to_tritons_own_bytes(vllm, rng, tmp_path, monkeypatch, phase):
    """For each kernel the engine's step launches, one launch (a random autotune config of those the engine lists):
    tileprobe's compile of the captured launch, from the engine's own module, gives Triton's own bytes."""
    entry = kernels.KERNELS[STEP]
    target = profile(rng.choice(TARGETS))
    model = _triton_prefill_model(rng)
    pt = _point(rng, model, phase)
    launches = captured(vllm, target, entry, model, pt)
    picked = {}
    for kernel in dict.fromkeys(la.kernel for la in launches):
        picked[kernel] = rng.choice([la for la in launches if la.kernel == kernel])
    wanted = {(la.kernel, la.autotune[0] if la.autotune else None): la for la in picked.values()}
    own = {(k, tuned): b for k, tuned, b in tritons_own(vllm, target, entry, model, pt, tmp_path, monkeypatch,
                                                        keep=lambda k, tuned: (k, tuned) in wanted)}
    assert set(own) == set(wanted), (name, sorted(own), sorted(wanted))
    cut = jobs.kernel_source if entry.compile_from == "extract" else \
        (lambda src, launch: loader.module_source(entry, src, target, launch.kernel))
    for key, la in wanted.items():
        assert answered(jobs.job_of(vllm, la, target.cc_int, cut)) == own[key], (target.name, model.gdn,
                                                                                            pt, key)


def test_chunk_prefill_launches_every_kernel_of_the_engines_chain(vllm, rng):
    """chunk_gated_delta_rule_fwd's launches, in order, come from the files of the functions its body calls (read
    from the wheel: the call order and each function's `from .module import`), one kernel each, every autotune
    config the engine lists."""
    entry = kernels.KERNELS[STEP]
    tree = ast.parse(vllm.read_text(vllm_gdn.FLA.replace(".", "/") + "/chunk.py"))
    fwd = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "chunk_gated_delta_rule_fwd")
    imports = {a.name: n.module for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    calls = sorted((n.lineno, n.func.id) for n in ast.walk(fwd) if isinstance(n, ast.Call)
                   and isinstance(n.func, ast.Name) and n.func.id in imports)
    package = vllm_gdn.FLA.replace(".", "/")
    want = [f"{package}/{imports[name]}.py" for _, name in calls]
    model = _triton_prefill_model(rng)  # sm_120: on sm_90 the engine's selector runs FlashInfer's prefill instead
    launches = [la for la in captured(vllm, profile("rtx-pro-6000"), entry, model, _point(rng, model, "prefill"))
                if la.kernel_file.rsplit("/", 1)[1] in CHUNK_FILES]
    got = list(dict.fromkeys((la.kernel, la.kernel_file) for la in launches))
    assert [f for _, f in got] == want, (got, want)
    for kernel, _ in got:
        mine = [la for la in launches if la.kernel == kernel]
        assert all(la.autotune and la.autotune[1] == la.autotune[2] == len(mine) for la in mine), kernel


@pytest.mark.parametrize("target_name", TARGETS)
def test_chunk_o_block_list_follows_the_targets_shared_memory(vllm, rng, target_name):
    """chunk_o.py's `BKV_LIST = ... if check_shared_mem() else ...` is decided by the stand-in Triton driver's
    max_shared_mem (the target's opt-in limit) against utils.py's Backend.DEFAULT: the captured chunk_fwd_kernel_o
    configs' BK values are the list of the branch the engine text gives for the target. On h200 the engine's step
    runs FlashInfer's prefill instead (its selector's sm_90 test): no chunk launch at all, and the chunk-prefill
    entry's row names that choice."""
    utils = vllm.read_text("vllm/third_party/flash_linear_attention/ops/utils.py")
    backend = next(n for n in ast.parse(utils).body if isinstance(n, ast.ClassDef) and n.name == "Backend")
    default = next(ast.literal_eval(s.value) for s in backend.body if isinstance(s, ast.Assign)
                   and ast.unparse(s.targets[0]) == "DEFAULT")
    chunk_o = vllm.read_text("vllm/third_party/flash_linear_attention/ops/chunk_o.py")
    bkv = next(n.value for n in ast.parse(chunk_o).body if isinstance(n, ast.Assign)
               and ast.unparse(n.targets[0]) == "BKV_LIST")
    target = profile(target_name)
    want = ast.literal_eval(bkv.body if target.smem_optin >= default else bkv.orelse)
    entry = kernels.KERNELS[STEP]
    model = _triton_prefill_model(rng)
    pt = _point(rng, model, "prefill")
    launches = captured(vllm, target, entry, model, pt)
    got = sorted({la.arg("BK") for la in launches if la.kernel == "chunk_fwd_kernel_o"})
    chunk = kernels.KERNELS["vllm-gdn-chunk-prefill"]
    with capture.engine_session(vllm, target, chunk.allow, chunk.stand_ins) as s:
        other = chunk.chooses(s, model, pt)
    if target.cc_int == 90:
        assert got == [] and other is not None and "FlashInfer" in other.runs, (got, other)
    else:
        assert other is None and got == sorted(want)


@pytest.mark.parametrize("target_name", TARGETS)
def test_causal_conv1d_launches_with_cudas_pdl_answer(vllm, rng, target_name):
    """causal_conv1d passes `launch_pdl=current_platform.is_arch_support_pdl()`: the captured value is what
    CudaPlatformBase.is_arch_support_pdl's return expression (vllm/platforms/cuda.py) gives for the target's major
    (vLLM's base Platform would answer False)."""
    text = vllm.read_text("vllm/platforms/cuda.py")
    cls = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "CudaPlatformBase")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "is_arch_support_pdl")
    last = fn.body[-1]  # the function's closing `return`, after its try/except
    assert isinstance(last, ast.Return)
    target = profile(target_name)
    want = eval(ast.unparse(last.value), {"major": int(target.cc.split(".")[0])})  # noqa: S307
    model = _model(rng)
    for kernel, phase in (("_causal_conv1d_fwd_kernel", "prefill"), ("_causal_conv1d_update_kernel", "decode")):
        (launch,) = [la for la in captured(vllm, target, kernels.KERNELS[STEP], model, _point(rng, model, phase))
                     if la.kernel == kernel]
        assert launch.arg("launch_pdl") is want, (kernel, target_name)


def _capability_chain(text: str) -> list[ast.If]:
    """The selector's if/elif chain of device-capability tests, as the wheel's text has it."""
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == vllm_gdn.SELECTOR)
    node = next(n for n in ast.walk(fn) if isinstance(n, ast.If) and "is_device_capability" in ast.unparse(n.test))
    chain = [node]
    while len(chain[-1].orelse) == 1 and isinstance(chain[-1].orelse[0], ast.If):
        chain.append(chain[-1].orelse[0])
    return chain


def _selection(vllm, target_name, model):
    """The entry's answer, and the first test of the engine's chain that holds, evaluated from the wheel's text
    with the same stand-in platform and the model's head_k_dim."""
    entry = kernels.KERNELS["vllm-gdn-chunk-prefill"]
    text = vllm.read_text(vllm_gdn.LAYER)
    with capture.engine_session(vllm, profile(target_name), entry.allow, entry.stand_ins) as s:
        got = entry.chooses(s, model, kernels.Point(1, 64))
        scope = {"current_platform": s.module("vllm.platforms").current_platform,
                 "head_k_dim": model.gdn.key_head_dim}
        first = next((n for n in _capability_chain(text)
                      if eval(f"({ast.get_source_segment(text, n.test)})", scope)), None)  # noqa: S307
    return got, first, text


@pytest.mark.parametrize("target_name", TARGETS)
def test_prefill_selection_agrees_with_the_engine_line_it_names(vllm, rng, target_name):
    answers = []
    for key_head_dim in (128, rng.choice([64, 256])):
        model = _model(rng, key_head_dim)
        got, first, text = _selection(vllm, target_name, model)
        answers.append(got is None)
        assert (got is None) == (first is None), (target_name, model.gdn, got)
        if got is None:
            continue
        path, line = got.line.rsplit(":", 1)
        assert path == vllm_gdn.LAYER and int(line) == first.lineno
        assert text.splitlines()[first.lineno - 1].strip().startswith(("if ", "elif"))
        assert got.why == " ".join(ast.get_source_segment(text, first.test).split())
        assert got.runs.startswith("FlashInfer GDN prefill kernel")
    if target_name == "rtx-pro-6000":  # sm_120: one case each way (head_k_dim 128 or not)
        assert sorted(answers) == [False, True], answers


def test_a_cuda_12_build_keeps_the_triton_prefill_on_sm120(vllm, rng, monkeypatch):
    """The selector's sm_12x test asks for CUDA runtime 13: with a CUDA 12 build the stand-in answers 12 and vLLM's
    own selector keeps Triton on the RTX PRO 6000, while Hopper still takes FlashInfer."""
    monkeypatch.setattr(vllm_gdn, "cuda_runtime_major", lambda origin: 12)
    model = _model(rng, 128)
    got, first, _ = _selection(vllm, "rtx-pro-6000", model)
    assert got is None and first is None
    got, first, _ = _selection(vllm, "h200", model)
    assert got is not None and got.line.endswith(f":{first.lineno}")


def test_the_cuda_runtime_is_the_wheels(vllm):
    """The runtime read from the wheel's extensions agrees with its METADATA's cuNN extras."""
    meta = vllm.read_text(f"vllm-{vllm.version}.dist-info/METADATA")
    extras = {int(m) for m in re.findall(r"^Requires-Dist: [\w-]+\[cu(\d+)\]", meta, re.M)}
    assert extras == {vllm_gdn.cuda_runtime_major(vllm.origin)}


def test_decode_kernel_follows_the_engines_env_flag(vllm, rng, monkeypatch):
    """_forward_core's own test of `enable_packed_recurrent_decode` (the engine's VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE)
    picks the decode kernel of a decode-only batch."""
    entry = kernels.KERNELS[STEP]
    model = _model(rng)
    target = profile(rng.choice(TARGETS))
    pt = _point(rng, model, "decode")
    on = {la.kernel for la in captured(vllm, target, entry, model, pt)}
    monkeypatch.setenv("VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE", "0")
    off = {la.kernel for la in captured(vllm, target, entry, model, pt)}
    assert "fused_recurrent_gated_delta_rule_packed_decode_kernel" in on - off
    assert "fused_sigmoid_gating_delta_rule_update_kernel" in off - on


def test_mixed_batch_split_is_the_builders(vllm, rng):
    """A mixed batch (decodes first, one prefill chunk over cached tokens): the decode kernel's cu_seqlens and the
    post-conv prep's token count come from the engine's builder split (num_decodes = batch - 1, the chunk's seq_len
    tokens to the prefill), and the conv1d's initial state is the builder's (the chunk has prior state)."""
    entry = kernels.KERNELS[STEP]
    model = _model(rng)
    pt = _point(rng, model, "mixed")
    launches = captured(vllm, profile(rng.choice(TARGETS)), entry, model, pt)
    (dec,) = [la for la in launches if la.kernel == "fused_sigmoid_gating_delta_rule_update_kernel"]
    assert dec.arg("cu_seqlens").shape == (pt.batch,), dec.arg("cu_seqlens")  # num_decodes + 1
    (prep,) = [la for la in launches if la.kernel == "_fused_post_conv_kernel"]
    assert prep.arg("L") == pt.seq_len, prep.args


def test_gdn_entries_serve_only_models_with_gdn_layers(rng):
    without = rng.choice([m for m in ATTENTION_PRESETS.values() if m.gdn is None and not m.mla])
    for entry in vllm_gdn.ENTRIES:
        assert entry.serves(without) and entry.serves(ATTENTION_PRESETS["qwen3-next-80b-a3b"]) is None
    assert not {k.name for k in run.serving("vllm", without)} & set(GDN)
    assert set(GDN) <= {k.name for k in run.serving("vllm", ATTENTION_PRESETS["qwen3-next-80b-a3b"])}
    qwen = replace(_model(rng), gdn=None)
    assert all(entry.serves(qwen) for entry in vllm_gdn.ENTRIES)


def test_heads_that_do_not_split_over_tp_are_a_usage_error(vllm, rng):
    model = _model(rng)
    odd = replace(model, gdn=replace(model.gdn, key_heads=3, value_heads=3 * rng.choice([1, 2])))
    with pytest.raises(UsageError, match="do not split over 2 ranks"):
        captured(vllm, profile("h200"), kernels.KERNELS[STEP], odd, kernels.Point(1, 16, 2, None, "decode"))


def test_launches_differing_only_in_an_unspecialised_length_are_one_compile(vllm, rng):
    """The chunk chain's T is do_not_specialize: two prefills of other lengths (same tensors' dtypes, same configs)
    plan the same compiles; each job's bytes are Triton's own for its real arguments (the test above)."""
    entry = kernels.KERNELS[STEP]
    target = profile(rng.choice(TARGETS))
    model = _triton_prefill_model(rng)
    a, b = rng.sample(range(17, 1500), 2)
    cut = lambda src, launch: loader.module_source(entry, src, target, launch.kernel)  # noqa: E731
    plans = [{jobs.job_of(vllm, la, target.cc_int, cut) for la in captured(vllm, target, entry, model,
                                                                           kernels.Point(1, n, 1))
              if la.kernel_file.rsplit("/", 1)[1] in CHUNK_FILES} for n in (a, b)]
    assert plans[0] == plans[1] and all(la.unspecialized == ("T",) for la in captured(
        vllm, target, entry, model, kernels.Point(1, a, 1)) if la.kernel.startswith("chunk_fwd_kernel_o")), (a, b)
