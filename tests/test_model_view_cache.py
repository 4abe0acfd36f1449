"""A config.json's engine view kept by content key (tileprobe.model_config.engine_view with a cache): read again, the
same view without importing transformers; any input it depends on (the file's fields, transformers' files, the
environment it reads, tileprobe's code) is another key, so a changed input is computed afresh."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tileprobe import model_config
from tileprobe.models import attention_model

CONFIGS = Path(__file__).parent / "data" / "configs"


def _entries(cache):
    return sorted((cache / model_config.VIEW_FOLDER).rglob("*.json"))


def test_a_kept_view_is_the_computed_one_and_needs_no_transformers(tmp_path):
    cache = tmp_path / "cache"
    doc = json.loads((CONFIGS / "gemma-3-27b-it" / "config.json").read_text())
    view = model_config.engine_view(doc, cache)
    assert view == model_config.engine_view(doc) and len(_entries(cache)) == 1
    assert view["text_config"]["layer_types"] != doc["text_config"].get("layer_types")  # the class filled it in
    code = ("import sys; sys.modules['transformers'] = None\n"
            "from pathlib import Path\n"
            "from tileprobe.models import attention_model\n"
            f"print(repr(attention_model({str(CONFIGS / 'gemma-3-27b-it')!r}, Path({str(cache)!r}))))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=os.path.dirname(__file__))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == repr(attention_model(str(CONFIGS / "gemma-3-27b-it")))
    # without the entry and without transformers, the file as it is: another answer (so the entry was served above)
    (no_cache := subprocess.run([sys.executable, "-c", code.replace(f"Path({str(cache)!r})", "None")],
                                capture_output=True, text=True, timeout=120, cwd=os.path.dirname(__file__)))
    assert no_cache.stdout.strip() != p.stdout.strip() or no_cache.returncode != 0


def test_every_input_of_the_view_is_in_its_key(tmp_path, monkeypatch):
    doc = json.loads((CONFIGS / "gemma-3-4b-it" / "config.json").read_text())
    key = model_config._view_key(doc)
    other = json.loads(json.dumps(doc))
    other["text_config"]["sliding_window"] = (other["text_config"].get("sliding_window") or 0) + 1
    assert model_config._view_key(other) != key
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "info")
    assert model_config._view_key(doc) != key
    monkeypatch.delenv("TRANSFORMERS_VERBOSITY")
    real = model_config.content_key.distribution
    monkeypatch.setattr(model_config.content_key, "distribution", lambda n: [real(n)[0], "other files"])
    assert model_config._view_key(doc) != key
    monkeypatch.setattr(model_config.content_key, "distribution", real)
    real_files = model_config.content_key.files
    monkeypatch.setattr(model_config.content_key, "files", lambda *p: real_files(*p) + "edited")
    assert model_config._view_key(doc) != key
    monkeypatch.setattr(model_config.content_key, "files", real_files)
    assert model_config._view_key(doc) == key


def test_a_changed_file_is_read_afresh_and_a_broken_entry_is_computed_again(tmp_path):
    cache = tmp_path / "cache"
    doc = json.loads((CONFIGS / "Qwen3-30B-A3B" / "config.json").read_text())
    first = model_config.engine_view(doc, cache)
    other = dict(doc, num_attention_heads=doc["num_attention_heads"] * 2)
    second = model_config.engine_view(other, cache)
    assert second["num_attention_heads"] == 2 * first["num_attention_heads"] and len(_entries(cache)) == 2
    for entry in _entries(cache):
        entry.write_text("{not json")
    assert model_config.engine_view(doc, cache) == first == model_config.engine_view(doc)
