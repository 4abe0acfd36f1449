"""The engine's own log lines under the audit's stand-in vllm.logger: a *_once message is said once per process (as
vLLM's logger does), marked as the engine's, never bare like an error of tileprobe's."""

from __future__ import annotations

from tileprobe.audit import vllm_stand_ins


def test_a_warning_once_is_said_once_and_as_the_engines(capsys, rng):
    msg = f"Using default MoE config. Performance might be sub-optimal! ({rng.random()})"
    for name in ("fused_moe", "fused_moe", "other"):
        vllm_stand_ins.init_logger("tileprobe.audit")(name).warning_once(msg)
    err = capsys.readouterr().err.splitlines()
    said = [ln for ln in err if msg in ln]
    assert len(said) == 1 and said[0].startswith("engine log (the engine's own WARNING"), err
