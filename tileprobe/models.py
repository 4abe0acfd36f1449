"""A Hugging Face model's config.json, read into explicit fields: what tileprobe sizes kernels for.

`read_config(path)` reads the MoE fields into a `ModelConfig` whose `.moe()` is the same MoEModel the workload presets
are (tileprobe.workloads); a field that is missing or of the wrong type is a UsageError naming it (one line, exit 2).

The fields and the names they go by in public configs:
- routed experts: `n_routed_experts` (DeepSeek, Kimi, GLM), `num_local_experts` (Mixtral, gpt-oss, Llama 4),
  `num_experts` (Qwen3-MoE, Qwen3-Next), the first one present;
- experts per token: `num_experts_per_tok`;
- an expert's intermediate size: `moe_intermediate_size`, else `intermediate_size` (Mixtral, gpt-oss and Llama 4 have
  no separate MoE size: theirs is the experts');
- `hidden_size`;
- shared experts: `n_shared_experts` (optional, 0 when absent: they are not routed);
- `quantization_config` (optional): `quant_method` and, for fp8, `weight_block_size`.
A multimodal config keeps its language model's fields under `text_config`; they are read from there when the top
level has no experts field.

The attention and SSM fields (read_attention) are read from the config as the engine's config object holds it
(tileprobe.model_config.engine_view: transformers' config class for the file's model_type fills in the defaults a
published file leaves out); the MoE fields as the file states them. `--model` may name a preset, a config.json, its
folder, or a Hugging Face model id (tileprobe.model_config.config_file).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from tileprobe.errors import UsageError
from tileprobe.model_config import config_file, engine_view
from tileprobe.workloads import PRESETS as MOE_PRESETS
from tileprobe.workloads import MoEModel

EXPERT_FIELDS = ("n_routed_experts", "num_local_experts", "num_experts")
INTER_FIELDS = ("moe_intermediate_size", "intermediate_size")


@dataclass(frozen=True)
class Quantization:
    """quantization_config, as far as the MoE GEMMs' scheme goes."""

    method: str  # quant_method: fp8, mxfp4, compressed-tensors, ...
    weight_block_size: tuple[int, int] | None  # fp8 block-wise: [block_n, block_k]


@dataclass(frozen=True)
class ModelConfig:
    """One config.json's fields, each named as it was read (`*_field`: which key supplied it)."""

    path: str
    name: str  # the folder the file sits in, else its model_type
    model_type: str | None
    hidden_size: int
    experts: int
    experts_field: str
    experts_per_token: int
    moe_intermediate_size: int
    inter_field: str
    shared_experts: int
    quantization: Quantization | None

    def moe(self) -> MoEModel:
        """The MoE shape in the presets' form."""
        return MoEModel(self.name, self.hidden_size, self.moe_intermediate_size, self.experts,
                        self.experts_per_token, self.shared_experts)

    def scheme(self) -> str:
        """The fused-MoE quant scheme tileprobe names it (bf16, fp8, fp8-block); UsageError for another method."""
        q = self.quantization
        if q is None:
            return "bf16"
        if q.method == "fp8":
            if q.weight_block_size is None:
                return "fp8"
            if q.weight_block_size == (128, 128):
                return "fp8-block"
            raise UsageError(f"{self.path}: quantization_config.weight_block_size {list(q.weight_block_size)}: the "
                             "Triton fused-MoE block scheme tileprobe sizes is [128, 128]")
        raise UsageError(f"{self.path}: quantization_config.quant_method {q.method!r}: tileprobe sizes the Triton "
                         "fused-MoE configs of bf16, fp8 and fp8 [128, 128] blocks")


def _int(doc: dict, key: str, path: str, where: str, optional: bool = False) -> int | None:
    if key not in doc:
        if optional:
            return None
        raise UsageError(f"{path}: no {where}{key} (a whole number) in this config.json")
    v = doc[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        if optional and v in (0, None) and not isinstance(v, bool):
            return None
        raise UsageError(f"{path}: {where}{key} is {v!r}, not a positive whole number")
    return v


def _first(doc: dict, keys: tuple[str, ...], path: str, where: str) -> tuple[int, str]:
    key = next((k for k in keys if doc.get(k) is not None), None)
    if key is None:
        raise UsageError(f"{path}: no {where}{' / '.join(keys)} (a whole number) in this config.json")
    return _int(doc, key, path, where), key


def _quantization(doc: dict, path: str, where: str) -> Quantization | None:
    q = doc.get("quantization_config")
    if q is None:
        return None
    field = f"{where}quantization_config"
    if not isinstance(q, dict):
        raise UsageError(f"{path}: {field} is {type(q).__name__}, not an object")
    method = q.get("quant_method")
    if not isinstance(method, str):
        raise UsageError(f"{path}: {field}.quant_method is {method!r}, not a string")
    block = q.get("weight_block_size")
    if block is not None:
        if not (isinstance(block, list) and len(block) == 2
                and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
            raise UsageError(f"{path}: {field}.weight_block_size is {block!r}, not two positive whole numbers")
        block = (block[0], block[1])
    return Quantization(method, block)



def model_name(path: Path) -> str:
    """A config file's model name: its folder's for a `config.json` (a Hugging Face snapshot), else its stem
    (results/audit/models/gemma-3-4b.json: gemma-3-4b)."""
    return path.resolve().parent.name if path.name == "config.json" else path.stem


def read_json(path: Path) -> dict:
    """A config.json's object; one UsageError line naming the file when it cannot be read or is not an object."""
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"--model {path}: cannot read ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"--model {path}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise UsageError(f"--model {path}: a config.json is an object, this is {type(doc).__name__}")
    return doc

def read_config(path: str | Path) -> ModelConfig:
    """The MoE fields of a Hugging Face config.json (the module docstring's names); `path` may also be its folder or
    a Hugging Face model id."""
    p, hub_name = config_file(str(path), "--model", MOE_PRESETS, "--workload")
    doc = read_json(p)
    top, where = doc, ""
    if not any(k in doc for k in EXPERT_FIELDS) and isinstance(doc.get("text_config"), dict):
        doc, where = doc["text_config"], "text_config."
    s = str(path)
    experts, experts_field = _first(doc, EXPERT_FIELDS, s, where)
    inter, inter_field = _first(doc, INTER_FIELDS, s, where)
    top_k = _int(doc, "num_experts_per_tok", s, where)
    if top_k > experts:
        raise UsageError(f"{s}: {where}num_experts_per_tok {top_k} > {experts_field} {experts}")
    model_type = doc.get("model_type")
    folder = hub_name or model_name(p)
    return ModelConfig(s, folder or str(model_type or p.name), model_type if isinstance(model_type, str) else None,
                       _int(doc, "hidden_size", s, where), experts, experts_field, top_k, inter, inter_field,
                       _int(doc, "n_shared_experts", s, where, optional=True) or 0,
                       _quantization(*((top, s, "") if "quantization_config" in top else (doc, s, where))))


# ----------------------------------------------------------------------------------------------------------------
# Attention fields (tileprobe audit)
# ----------------------------------------------------------------------------------------------------------------

DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


@dataclass(frozen=True)
class SSMDims:
    """A Mamba-2 mixer's sizes, under each family's names (SSM_FIELDS): Nemotron-H (`mamba_num_heads`,
    `mamba_head_dim`, `ssm_state_size`, `n_groups`, `chunk_size`, `conv_kernel`; layers: `hybrid_override_pattern`'s
    `M`), Mamba2ForCausalLM (`num_heads`, `head_dim`, `state_size`, `n_groups`, `chunk_size`, `conv_kernel`; every
    layer), Falcon-H1 (`mamba_n_heads`, `mamba_d_head`, `mamba_d_state`, `mamba_n_groups`, `mamba_chunk_size`,
    `mamba_d_conv`; every layer, beside its attention)."""

    heads: int
    head_dim: int
    state_size: int
    groups: int
    chunk_size: int
    conv_kernel: int


@dataclass(frozen=True)
class VisionDims:
    """A vision encoder's attention (`vision_config`: `num_attention_heads` or `num_heads`; `head_dim`, else
    `hidden_size` or `embed_dim` over the heads)."""

    heads: int
    head_dim: int


@dataclass(frozen=True)
class Routing:
    """How the MoE layer routes, as vLLM's model code passes it to its FusedMoE (the router factory's arguments):
    grouped (`use_grouped_topk`: the config states n_group, as DeepSeek-V2/V3, Kimi and GLM-4.5 do), groups /
    topk_group, scoring (`scoring_func`, else sigmoid for GLM-4.5's glm4_moe.py, else softmax), bias (an
    e_score_correction_bias: `topk_method` noaux_tc, or glm4_moe, which always has one), renormalize
    (`norm_topk_prob`, default True), scaling (`routed_scaling_factor`, default 1.0)."""

    grouped: bool
    groups: int | None
    topk_group: int | None
    scoring: str
    bias: bool
    renormalize: bool
    scaling: float


def _routing(doc: dict, model_type: str | None) -> Routing:
    groups, topk_group = doc.get("n_group"), doc.get("topk_group")
    glm = model_type == "glm4_moe"
    return Routing(grouped=groups is not None, groups=groups, topk_group=topk_group,
                   scoring=str(doc.get("scoring_func") or ("sigmoid" if glm else "softmax")),
                   bias=glm or doc.get("topk_method") == "noaux_tc", renormalize=bool(doc.get("norm_topk_prob", True)),
                   scaling=float(doc.get("routed_scaling_factor") or 1.0))


@dataclass(frozen=True)
class GatedDeltaDims:
    """A gated-delta-net layer's sizes (Qwen3-Next / Qwen3.5: `linear_num_key_heads`, `linear_num_value_heads`,
    `linear_key_head_dim`, `linear_value_head_dim`, `linear_conv_kernel_dim`; layers: `layer_types`'
    `linear_attention`)."""

    key_heads: int
    value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int


@dataclass(frozen=True)
class AttentionConfig:
    """The attention fields of a config.json (or a preset): what the engines' attention launchers are sized by.

    heads: `num_attention_heads` (0, with kv_heads and head_dim 0: no attention layers, a pure Mamba-2 model; the
    attention entries do not serve it); kv_heads: `num_key_value_heads` (absent: = heads, MHA); head_dim: `head_dim`,
    else hidden_size / heads; sliding_window: `sliding_window` (None: full attention); layer_types: `layer_types`
    as the config class holds it (sliding_attention / full_attention per layer, derived for Gemma-3 from
    sliding_window_pattern; hybrid for Falcon-H1; transformers' names of Nemotron-H's blocks; empty when absent);
    dtype: `torch_dtype` (or `dtype`) as bf16/fp16/fp32, bf16 when absent; sinks: attention sinks (gpt-oss); MLA
    ranks (DeepSeek/Kimi) when present; linear_attention: `attn_type_list` (MiniMax-Text-01 / M1) holds a 0, a
    lightning-attention layer."""

    name: str
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str = "bf16"
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()
    sinks: bool = False
    model_type: str | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    linear_attention: bool = False  # some layers are linear attention (MiniMax attn_type_list: 0 = linear)
    ssm: SSMDims | None = None  # Mamba-2 mixers (Nemotron-H's M layers, Mamba2ForCausalLM, Falcon-H1)
    gdn: GatedDeltaDims | None = None  # gated-delta-net layers (layer_types has linear_attention)
    vision: VisionDims | None = None  # the vision encoder's attention, when the config has a vision_config
    architecture: str | None = None  # config.json `architectures[0]` (the engines register their overrides by it)
    index_topk: int | None = None  # DeepSeek-V3.2 / GLM-5 sparse attention's indexer top-k (`index_topk`)
    moe: MoEModel | None = None  # the routed experts, when the config has them (read_config's fields)
    routing: Routing | None = None  # how those experts are picked (None: a preset, whose file was not read)
    quant: Quantization | None = None  # quantization_config (fp8 [+ weight_block_size], mxfp4, modelopt_fp4, ...)
    # the dense shapes (the forward pass's linears and norms; None where the file or preset does not say)
    hidden_size: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank is not None

    def windows(self) -> tuple[int | None, ...]:
        """The distinct windows the layers attend with (None: full attention)."""
        if not self.layer_types:
            return (self.sliding_window,)
        kinds = dict.fromkeys(self.layer_types)
        return tuple(dict.fromkeys(self.sliding_window if "sliding" in k else None for k in kinds))


_MLA = dict(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
_FP8_BLOCK = Quantization("fp8", (128, 128))
# the presets' routing, as their published config.json files state it
_SOFTMAX = Routing(False, None, None, "softmax", False, True, 1.0)
_DEEPSEEK_V3 = Routing(True, 8, 4, "sigmoid", True, True, 2.5)  # n_group 8, topk_group 4, noaux_tc
_KIMI_K2 = Routing(True, 1, 1, "sigmoid", True, True, 2.827)  # n_group 1, topk_group 1, noaux_tc
ATTENTION_PRESETS = {m.name: m for m in (
    AttentionConfig("qwen3-30b-a3b", 32, 4, 128, "bf16", model_type="qwen3_moe", moe=MOE_PRESETS["qwen3-30b-a3b"],
                    routing=_SOFTMAX),
    AttentionConfig("gpt-oss-120b", 64, 8, 64, "bf16", sliding_window=128,
                    layer_types=("sliding_attention", "full_attention"), sinks=True, model_type="gpt_oss",
                    moe=MOE_PRESETS["gpt-oss-120b"], quant=Quantization("mxfp4", None), routing=_SOFTMAX),
    # MiniMax-M1 (config.json: hidden 6144, 64 heads, 8 KV heads, head_dim 128, attn_type_list 0/1: lightning
    # attention in 7 of every 8 layers)
    AttentionConfig("minimax-m1", 64, 8, 128, "bf16", model_type="minimax_m1", linear_attention=True),
    # DeepSeek-V3 / Kimi-K2 (config.json: MLA kv_lora_rank 512, qk_rope 64, qk_nope 128, v_head 128; 128 / 64
    # heads; hidden 7168 / 128 heads = 56 is head_dim's fallback, unused by MLA; fp8 [128, 128] blocks)
    AttentionConfig("deepseek-v3", 128, 128, 56, "bf16", model_type="deepseek_v3", **_MLA,
                    moe=MOE_PRESETS["deepseek-v3"], quant=_FP8_BLOCK, routing=_DEEPSEEK_V3),
    AttentionConfig("kimi-k2", 64, 64, 112, "bf16", model_type="kimi_k2", **_MLA, moe=MOE_PRESETS["kimi-k2"],
                    quant=_FP8_BLOCK, routing=_KIMI_K2),
    # Qwen3-Next-80B-A3B (config.json: 16 heads, 2 KV heads, head_dim 256; gated delta net 16 key / 32 value heads
    # of 128, conv 4, every 4th layer full attention)
    AttentionConfig("qwen3-next-80b-a3b", 16, 2, 256, "bf16", model_type="qwen3_next",
                    layer_types=("linear_attention", "full_attention"), gdn=GatedDeltaDims(16, 32, 128, 128, 4),
                    moe=MOE_PRESETS["qwen3-next-80b-a3b"], routing=_SOFTMAX),
    # Nemotron-H-8B-Base-8K (nvidia/Nemotron-H-8B-Base-8K config.json, as NVIDIA/TensorRT-LLM copies it in
    # tests/unittest/_torch/modeling/test_modeling_mamba_hybrid.py: hidden 4096, 32 heads, 8 KV heads,
    # attention_head_dim 128; Mamba-2 128 heads of 64, ssm_state_size 128, n_groups 8, chunk_size 256, conv_kernel 4;
    # hybrid_override_pattern 24 M / 4 * of 52 layers; bf16). results/audit/models/nemotron-h-8b.json has the fields.
    AttentionConfig("nemotron-h-8b", 32, 8, 128, "bf16", model_type="nemotron_h",
                    ssm=SSMDims(128, 64, 128, 8, 256, 4)),
)}


def _str(doc: dict, key: str, path: str, where: str) -> str | None:
    v = doc.get(key)
    if v is not None and not isinstance(v, str):
        raise UsageError(f"{path}: {where}{key} is {v!r}, not a string")
    return v


def _ssm(doc: dict, model_type: str | None, arch: str | None, path: str, where: str) -> SSMDims | None:
    """The Mamba-2 mixer's sizes, by the family's names (SSM_FIELDS), when the model has Mamba-2 layers."""
    pattern = _str(doc, "hybrid_override_pattern", path, where) or ""
    if "M" in pattern:
        family = "nemotron_h"
    elif model_type == "mamba2" or arch == "Mamba2ForCausalLM":
        family = "mamba2"
    elif "mamba_n_heads" in doc or "mamba_d_state" in doc:
        family = "falcon_h1"
    else:
        return None
    return SSMDims(*(_int(doc, k, path, where) for k in SSM_FIELDS[family]))


def read_attention(path: str | Path, name: str | None = None, cache: Path | None = None) -> AttentionConfig:
    """The attention fields of a Hugging Face config.json (AttentionConfig's names), read as the engine's config
    object holds them (tileprobe.model_config.engine_view); a missing or wrong-typed field is a UsageError naming
    it. `name`: the model's name (default: model_name of the path). `cache`: a build cache root keeping the engine
    view by content key (engine_view)."""
    p = Path(path)
    raw = read_json(p)
    top = engine_view(raw, cache)
    doc, where, raw_doc = top, "", raw
    if "num_attention_heads" not in doc and isinstance(doc.get("text_config"), dict):
        doc, where, raw_doc = doc["text_config"], "text_config.", raw["text_config"]
    s = str(path)
    model_type = _str(doc, "model_type", s, where)
    arch = _architecture(top, doc, s)
    ssm = _ssm(doc, model_type, arch, s, where)
    if "num_attention_heads" not in doc and ssm is not None:
        heads = kv_heads = head_dim = 0  # a pure Mamba-2 model: no attention layers
    else:
        heads = _int(doc, "num_attention_heads", s, where)
        kv_heads = _int(doc, "num_key_value_heads", s, where, optional=True) or heads
        if heads % kv_heads:
            raise UsageError(f"{s}: {where}num_attention_heads {heads} is not a multiple of num_key_value_heads "
                             f"{kv_heads}")
        head_dim = _int(doc, "head_dim", s, where, optional=True)
        if head_dim is None:
            hidden = _int(doc, "hidden_size", s, where)
            if hidden % heads:
                raise UsageError(f"{s}: no {where}head_dim, and hidden_size {hidden} is not a multiple of "
                                 f"num_attention_heads {heads}")
            head_dim = hidden // heads
    # the dtype as the file states it: text_config's, else the top level's (Gemma-3 states it only there)
    raw_dtype = (_str(doc, "torch_dtype", s, where) or _str(doc, "dtype", s, where) or
                 (_str(top, "torch_dtype", s, "") or _str(top, "dtype", s, "") if where else None) or "bfloat16")
    if raw_dtype not in DTYPES:
        raise UsageError(f"{s}: {where}torch_dtype {raw_dtype!r}: tileprobe audits {', '.join(DTYPES)}")
    layer_types = doc.get("layer_types") or ()
    if not (isinstance(layer_types, (list, tuple)) and all(isinstance(t, str) for t in layer_types)):
        raise UsageError(f"{s}: {where}layer_types is {layer_types!r}, not a list of strings")
    mla = {k: _int(doc, k, s, where, optional=True) for k in
           ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")}
    kinds = doc.get("attn_type_list") or ()
    if not (isinstance(kinds, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in kinds)):
        raise UsageError(f"{s}: {where}attn_type_list is {kinds!r}, not a list of whole numbers")
    # gated delta net: the file's own layer_types name linear_attention layers (a class's derived layer_types may
    # call other mixers so: transformers' NemotronHConfig its Mamba layers, MiniMaxConfig its lightning ones)
    stated = raw_doc.get("layer_types") if isinstance(raw_doc.get("layer_types"), list) else ()
    gdn = GatedDeltaDims(*(_int(doc, k, s, where) for k in GDN_FIELDS)) \
        if "linear_attention" in stated or "linear_num_value_heads" in doc else None
    vision = _vision(top, s)
    moe = read_config(p).moe() if any(k in raw_doc for k in EXPERT_FIELDS) else None
    if moe is not None and name:
        moe = replace(moe, name=name)
    q = _quantization(*((raw, s, "") if "quantization_config" in raw else (raw_doc, s, where)))
    return AttentionConfig(name or model_name(p) or str(model_type or p.name), heads, kv_heads, head_dim,
                           DTYPES[raw_dtype], _int(doc, "sliding_window", s, where, optional=True),
                           tuple(layer_types), model_type == "gpt_oss", model_type, **mla,
                           linear_attention=0 in kinds, ssm=ssm, gdn=gdn, moe=moe,
                           quant=q, vision=vision, architecture=arch,
                           index_topk=_int(doc, "index_topk", s, where, optional=True),
                           hidden_size=_int(doc, "hidden_size", s, where, optional=True),
                           intermediate_size=_int(doc, "intermediate_size", s, where, optional=True),
                           vocab_size=_int(doc, "vocab_size", s, where, optional=True),
                           routing=_routing(doc, model_type) if moe is not None else None)


def _architecture(top: dict, doc: dict, path: str) -> str | None:
    archs = top.get("architectures", doc.get("architectures"))
    if archs is None:
        return None
    if not (isinstance(archs, list) and archs and all(isinstance(a, str) for a in archs)):
        raise UsageError(f"{path}: architectures is {archs!r}, not a list of names")
    return archs[0]


def _vision(top: dict, path: str) -> VisionDims | None:
    doc = top.get("vision_config")
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: vision_config is {type(doc).__name__}, not an object")
    where = "vision_config."
    heads, _ = _first(doc, ("num_attention_heads", "num_heads"), path, where)
    head_dim = _int(doc, "head_dim", path, where, optional=True)
    if head_dim is None:
        hidden, key = _first(doc, ("hidden_size", "embed_dim"), path, where)
        if hidden % heads:
            raise UsageError(f"{path}: {where}{key} {hidden} is not a multiple of its {heads} heads")
        head_dim = hidden // heads
    return VisionDims(heads, head_dim)


# config.json keys, in SSMDims' / GatedDeltaDims' field order (SSM: each family's names)
SSM_FIELDS = {
    "nemotron_h": ("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "chunk_size", "conv_kernel"),
    "mamba2": ("num_heads", "head_dim", "state_size", "n_groups", "chunk_size", "conv_kernel"),
    "falcon_h1": ("mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups", "mamba_chunk_size",
                  "mamba_d_conv"),
}
GDN_FIELDS = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
              "linear_conv_kernel_dim")


def attention_model(name_or_path: str, cache: Path | None = None) -> AttentionConfig:
    """A preset's AttentionConfig, else the config.json at the path (a folder: its config.json), else a Hugging Face
    model id's config.json (tileprobe.model_config.config_file: huggingface_hub's cache, offline or fetched).
    `cache`: a build cache root keeping the file's engine view (tileprobe.model_config.engine_view)."""
    if name_or_path in ATTENTION_PRESETS:
        return ATTENTION_PRESETS[name_or_path]
    p, hub_name = config_file(name_or_path, "--model", ATTENTION_PRESETS, "--model")
    if not p.exists():
        raise UsageError(f"--model {name_or_path}: neither a preset ({', '.join(ATTENTION_PRESETS)}), a config.json "
                         "or its folder, nor a Hugging Face model id (org/name)")
    return read_attention(p, hub_name, cache)
