"""The vLLM dialect: 0.8 folded the separate speculative flags into one --speculative-config
JSON argument. The old flags and the key each became are tabled in removed_flags (VLLM_KEYS);
V0-only knobs with no key today (VLLM_GONE) are reported, never dropped silently.
"""

from __future__ import annotations

import json
import shlex

from specgguf.migrate import removed_flags as lg
from specgguf.migrate.plan import Flag, Plan, scan_flags

_VLLM_KEY_ORDER = ("method", "model", "num_speculative_tokens", "prompt_lookup_max",
                   "prompt_lookup_min")


def migrate_vllm(plan: Plan) -> None:
    """vLLM 0.8 folded the separate speculative flags into one --speculative-config JSON."""
    flags, _ = scan_flags(plan.argv, plan.start, plan.dynamic)
    for flag in flags:
        if flag.name in lg.VLLM_GONE:
            plan.unsafe.append(f"{flag.show()}: no --speculative-config equivalent (current "
                               "vLLM has no such setting); remove it by hand")
    old = [f for f in flags if f.name in lg.VLLM_KEYS]
    if not old:
        return
    if any(f.name == "--speculative-config" for f in flags):
        plan.unsafe.append("both --speculative-config and "
                           f"{', '.join(f.typed for f in old)}: merge them by hand")
        return
    config = _vllm_config(plan, old)
    if config is None:
        return
    text = json.dumps(config)
    plan.rename(old[0], new_name="--speculative-config", new_value=text)
    for flag in old[1:]:
        plan.delete(flag)
    plan.notes.append(f"{' '.join(f.show() for f in old)} -> --speculative-config "
                      f"{shlex.quote(text)}: vLLM replaced these flags with one JSON argument")


def _vllm_config(plan: Plan, old: list[Flag]) -> dict[str, object] | None:
    """The --speculative-config the old flags meant, or None (and why, in plan.unsafe)."""
    values: dict[str, object] = {}
    for flag in old:
        key, kind = lg.VLLM_KEYS[flag.name]
        if flag.value is None:
            plan.unsafe.append(f"{flag.typed} has no value")
            return None
        if flag.dynamic:
            plan.unsafe.append(f"{flag.show()}: a shell variable cannot be placed inside the "
                               "--speculative-config JSON safely; write the JSON by hand")
            return None
        try:
            values[key] = kind(flag.value)
        except ValueError:
            plan.unsafe.append(f"{flag.show()}: not an integer")
            return None
    if values.get("model") == "[ngram]":
        del values["model"]
        values["method"] = "ngram"
    elif "model" not in values and {"prompt_lookup_max", "prompt_lookup_min"} & set(values):
        values["method"] = "ngram"
    elif "model" not in values:
        # no draft model: old vLLM ran the target's own multi-token-prediction layers
        # (DeepSeek-V3 style); current vLLM needs that said as method "mtp"
        values["method"] = "mtp"
        plan.notes.append("no draft model: the target's own MTP layers drafted, which current "
                          'vLLM needs as "method": "mtp"')
    ordered = {k: values[k] for k in _VLLM_KEY_ORDER if k in values}
    ordered.update((k, v) for k, v in values.items() if k not in ordered)
    return ordered
