"""A model as users name it, read the way the engines read it.

`engine_view(doc)`: a config.json's object with the fields tileprobe sizes kernels by filled in and normalised by
transformers' config class for its `model_type` (`CONFIG_MAPPING[model_type].from_dict`, what `AutoConfig` builds
and vLLM / SGLang hold), so that the defaults a published file leaves out come out as the engine sees them:
Gemma-3's head counts (Gemma-3-4B's text_config has none) and its `layer_types` (every 6th layer full attention, from
`sliding_window_pattern`), Qwen3's `layer_types`, Falcon-H1's resolved `mamba_d_head`. The view keeps the file's key
names, so tileprobe.models reads it with the same field checks and error lines as the file itself. A model_type
transformers does not know, a config the class refuses (a wrong-typed field: the field checks then name it), or no
transformers at all: the file as it is.

`config_file(name, ...)`: what `--model` names, as a config.json path: a file, a folder holding one, or a Hugging
Face model id (`org/name`) fetched into huggingface_hub's cache (HF_HOME / HF_HUB_CACHE) by `hf_hub_download`, read
from that cache offline (HF_HUB_OFFLINE=1); with neither network nor cache, one line naming the matching preset.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import warnings
from pathlib import Path

from tileprobe import content_key
from tileprobe.errors import UsageError

# config.json keys whose values are taken from the config class (each level: the top, text_config, vision_config).
# The routed-expert fields are not: a class's default expert count would make a dense model look like an MoE one
# (transformers' NemotronHConfig has n_routed_experts 8), so the MoE fields are read as the file states them.
ATTENTION_KEYS = (
    "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size", "sliding_window", "layer_types",
    "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "index_topk",
    # gated delta net (Qwen3-Next / Qwen3.5)
    "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
    "linear_conv_kernel_dim",
    # Mamba-2 mixers: Nemotron-H, Mamba2ForCausalLM, Falcon-H1 (and Bamba / GraniteMoeHybrid, which spell theirs the
    # same way)
    "mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "chunk_size", "conv_kernel",
    "num_heads", "state_size",
    "mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups", "mamba_chunk_size", "mamba_d_conv",
    "mamba_d_ssm",
)
VISION_KEYS = ("num_attention_heads", "num_heads", "head_dim", "hidden_size", "embed_dim")
NESTED = {"text_config": ATTENTION_KEYS, "vision_config": VISION_KEYS}


@contextlib.contextmanager
def _quiet():
    """transformers' and huggingface_hub's warnings (deprecated torch_dtype, retries) kept off stderr, whose last
    line is the one a UsageError prints."""
    loggers = [logging.getLogger(n) for n in ("transformers", "huggingface_hub")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def config_class(model_type: object):
    """transformers' config class for a model_type, else None (unknown, or transformers not installed)."""
    if not isinstance(model_type, str):
        return None
    try:
        with _quiet():
            from transformers.models.auto.configuration_auto import CONFIG_MAPPING
            return CONFIG_MAPPING[model_type] if model_type in CONFIG_MAPPING else None
    except Exception:  # ImportError, or a transformers that cannot import here: read the file by hand
        return None


def _plain(v):
    """A config attribute as config.json would hold it (tuples as lists), else None (not a JSON value)."""
    if isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)) and all(isinstance(x, (bool, int, float, str)) for x in v):
        return list(v)
    return None


def _overlay(raw: dict, cfg, keys: tuple[str, ...]) -> dict:
    """raw with each of `keys` the class holds (an attribute of its own, or one its attribute_map names) replaced by
    the class's value."""
    view = dict(raw)
    own = set(vars(cfg)) | set(getattr(cfg, "attribute_map", {}) or {})
    mla = raw.get("kv_lora_rank") is not None
    for k in keys:
        if k not in own or (k == "head_dim" and mla):
            continue  # DeepseekV3Config sets head_dim to qk_rope_head_dim; an MLA model's stays the file's
        try:
            v = _plain(getattr(cfg, k))
        except Exception:
            continue
        if v is not None:
            view[k] = v
    return view


VIEW_FORMAT = 1
VIEW_FOLDER = "model-views"


def _view_key(doc: dict) -> str:
    """The content key of engine_view(doc): the file's object, transformers' version and installed files (its RECORD's
    sha256) and those of every library it requires (content_key.closure), Python's version, the HF_* /
    TRANSFORMERS_* variables and this module's bytes."""
    return content_key.digest({"format": VIEW_FORMAT, "doc": doc, "transformers": content_key.distribution(
        "transformers"), "libraries": content_key.closure("transformers"), "python": sys.version,
        "env": content_key.env("HF_", "TRANSFORMERS_"), "code": content_key.files(Path(__file__))})


def engine_view(doc: dict, cache: Path | None = None) -> dict:
    """The config as the engine's config object holds it, in config.json's key names (module docstring). `cache`: a
    build cache root where the view is kept by content key (_view_key), so reading the same file again imports no
    transformers (nor the torch it imports)."""
    if cache is None:
        return _engine_view(doc)
    key = _view_key(doc)
    path = Path(cache) / VIEW_FOLDER / key[:2] / f"{key}.json"
    try:
        stored = json.loads(path.read_text())
        if isinstance(stored, dict) and stored.get("key") == key and isinstance(stored.get("view"), dict):
            return stored["view"]
    except (OSError, ValueError):
        pass  # absent or broken: computed again and rewritten
    view = _engine_view(doc)
    try:
        content_key.write_whole(path, json.dumps({"key": key, "view": view}).encode())
    except (TypeError, ValueError):  # not plain JSON: not kept
        pass
    return view


def _engine_view(doc: dict) -> dict:
    cls = config_class(doc.get("model_type"))
    if cls is None:
        return doc
    try:
        with _quiet():
            cfg = cls.from_dict(dict(doc))
    except Exception:  # the class refuses the file (strict field types): the hand reader names the field
        return doc
    view = _overlay(doc, cfg, ATTENTION_KEYS)
    for key, keys in NESTED.items():
        sub = getattr(cfg, key, None) if isinstance(doc.get(key), dict) else None
        if sub is not None and hasattr(sub, "to_dict"):
            view[key] = _overlay(doc[key], sub, keys)
    return view


# ----------------------------------------------------------------------------------------------------------------
# --model as users type it
# ----------------------------------------------------------------------------------------------------------------

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


def is_hub_id(name: str) -> bool:
    """`org/name`, not a .json file path."""
    return bool(HUB_ID.fullmatch(name)) and not name.endswith(".json") and len(name) <= 96


def matching_preset(repo_id: str, presets) -> str | None:
    """The preset a Hub id is: its name lower-cased is the preset's, or starts with it and a dash (the longest)."""
    tail = repo_id.rsplit("/", 1)[-1].lower()
    hits = [p for p in presets if tail == p or tail.startswith(p + "-")]
    return max(hits, key=len) if hits else None


def _offline() -> bool:
    truthy = {"1", "ON", "YES", "TRUE"}
    return any(os.environ.get(v, "").upper() in truthy for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_config(repo_id: str, flag: str, preset_hint: str) -> Path:
    """config.json of a Hub model id, through huggingface_hub's cache: from the cache when offline (or when the Hub
    cannot be reached), else fetched into it. Neither: one UsageError line saying so, with `preset_hint`."""
    try:
        with _quiet():
            from huggingface_hub import constants, get_hf_file_metadata, hf_hub_download, hf_hub_url
    except Exception:
        raise UsageError(f"{flag} {repo_id}: a Hugging Face model id needs huggingface_hub (pip install "
                         f"huggingface_hub){preset_hint}") from None
    cache = constants.HF_HUB_CACHE

    def cached() -> Path | None:
        try:
            with _quiet():
                return Path(hf_hub_download(repo_id, "config.json", local_files_only=True))
        except Exception:
            return None

    def refuse(why: str):
        raise UsageError(f"{flag} {repo_id}: {why}{preset_hint}") from None

    if _offline():
        return cached() or refuse(f"no config.json for it in the Hugging Face cache ({cache}) and HF_HUB_OFFLINE is "
                                  "set")
    try:  # one HEAD, no retries: without a network this answers at once instead of after huggingface_hub's backoff
        with _quiet():
            get_hf_file_metadata(hf_hub_url(repo_id, "config.json"), timeout=10)
            return Path(hf_hub_download(repo_id, "config.json"))
    except Exception as exc:
        kind = type(exc).__name__
        if kind in ("RepositoryNotFoundError", "GatedRepoError", "RemoteEntryNotFoundError", "EntryNotFoundError",
                    "RevisionNotFoundError", "DisabledRepoError", "HFValidationError"):
            return cached() or refuse(f"the Hugging Face Hub has no readable config.json for it ({kind})")
        return cached() or refuse(f"no config.json for it in the Hugging Face cache ({cache}) and the Hub cannot be "
                                  f"reached ({kind})")


def config_file(name: str, flag: str, presets, preset_flag: str) -> tuple[Path, str | None]:
    """The config.json `name` stands for, and the model's name when it is a Hub id (else None: the file names it).
    `presets`: names `name` may also be, offered when the file cannot be had."""
    p = Path(name)
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise UsageError(f"{flag} {name}: a folder without a config.json")
        return p / "config.json", None
    if p.exists() or not is_hub_id(name):
        return p, None
    preset = matching_preset(name, presets)
    hint = (f"; use its preset ({preset_flag} {preset}) or pass the model's config.json (the file or its folder)"
            if preset else f"; pass the model's config.json (the file or its folder), or a preset: "
            f"{', '.join(presets)}")
    return hub_config(name, flag, hint), name.rsplit("/", 1)[-1]
