"""Every sampler setting, declared once: llama.cpp's flag spellings, its LLAMA_ARG_* variable,
the request fields llama-server and OpenAI clients send, the default, the values it accepts.

The command line's flags (specgguf_cli.sampler_flags), the request fields of `serve` and of a
`--jsonl` line (`from_request`), their validation and the docs' table (`markdown_table`,
docs/sampling.md) are all read from SETTINGS. The defaults are SamplerParams' own
(specgguf.core.sampling).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from specgguf.core.dry import MAX_BREAKER_BYTES
from specgguf.core.samplers import NOT_IMPLEMENTED, SamplerOrderError, parse_order
from specgguf.core.sampling import SamplerParams
from specgguf.io.escapes import unescape
from specgguf.io.sampling_fields import N_PREDICT_LIMIT, is_int, is_number

#: the most logit-bias entries and sampler names one request or command line may give
MAX_BIAS = 4096
MAX_ORDER = 32

_DEFAULTS = {f.name: f.default for f in fields(SamplerParams)}


def _finite(v: Any) -> bool:
    return is_number(v)


def _at_least(lo: float) -> Callable[[Any], bool]:
    return lambda v: is_number(v) and v >= lo


def _within(lo: float, hi: float) -> Callable[[Any], bool]:
    return lambda v: is_number(v) and lo <= v <= hi


def _int_within(lo: int, hi: int) -> Callable[[Any], bool]:
    return lambda v: is_int(v) and lo <= v <= hi


def _positive_penalty(v: Any) -> bool:
    return is_number(v) and v > 0 and math.isfinite(1.0 / v)


@dataclass(frozen=True)
class Setting:
    """One sampler setting. `param`: SamplerParams' field (None: a setting of a stage specgguf
    does not run, accepted at `off` only); `flags`: the command line's spellings, llama.cpp's
    first; `fields`: the request fields that set it (the first is llama-server's)."""

    param: str | None
    flags: tuple[str, ...]
    fields: tuple[str, ...]
    kind: type
    ok: Callable[[Any], bool]
    what: str
    help: str
    env: str | None = None
    default: Any = None  # only for rows without a param (the value that leaves them off)
    off: Callable[[Any], bool] | None = None  # rows without a param: the values accepted
    shown: str | None = None  # the docs' spelling of the default, where str() would not do

    @property
    def name(self) -> str:
        return self.param or self.fields[0]

    @property
    def value_default(self) -> Any:
        return _DEFAULTS[self.param] if self.param is not None else self.default


SETTINGS: tuple[Setting, ...] = (
    Setting("temp", ("--temp", "--temperature"), ("temperature",), float, _at_least(0),
            "a number >= 0", "Temperature (0: greedy).", "LLAMA_ARG_TEMPERATURE"),
    Setting("top_k", ("--top-k",), ("top_k",), int, is_int, "an integer",
            "Top-k (<= 0: off).", "LLAMA_ARG_TOP_K"),
    Setting("top_p", ("--top-p",), ("top_p",), float, _within(0, 1), "a number in [0, 1]",
            "Top-p (1.0: off).", "LLAMA_ARG_TOP_P"),
    Setting("min_p", ("--min-p",), ("min_p",), float, _within(0, 1), "a number in [0, 1]",
            "Min-p (0.0: off).", "LLAMA_ARG_MIN_P"),
    Setting("typ_p", ("--typical", "--typical-p"), ("typical_p", "typ_p"), float,
            _within(0, 1), "a number in [0, 1]", "Locally typical sampling, p (1.0: off)."),
    Setting("top_n_sigma", ("--top-nsigma", "--top-n-sigma"), ("top_n_sigma",), float,
            _finite, "a number", "Top-n-sigma: keep logits within n std of the top (<= 0: off)."),
    Setting("xtc_probability", ("--xtc-probability",), ("xtc_probability",), float,
            _within(0, 1), "a number in [0, 1]", "XTC: chance to exclude top choices (0: off)."),
    Setting("xtc_threshold", ("--xtc-threshold",), ("xtc_threshold",), float, _within(0, 1),
            "a number in [0, 1]", "XTC: probability a top choice needs (> 0.5: off)."),
    Setting("dynatemp_range", ("--dynatemp-range",), ("dynatemp_range",), float, _at_least(0),
            "a number >= 0", "Dynamic temperature: temp +- this, by entropy (0: off)."),
    Setting("dynatemp_exponent", ("--dynatemp-exp",), ("dynatemp_exponent",), float,
            _at_least(0), "a number >= 0", "Dynamic temperature: entropy exponent."),
    Setting("penalty_last_n", ("--repeat-last-n",), ("repeat_last_n",), int,
            _int_within(-1, N_PREDICT_LIMIT), f"an integer in -1..{N_PREDICT_LIMIT}",
            "Penalties read the last N tokens, the prompt's included (0: off, -1: all)."),
    Setting("penalty_repeat", ("--repeat-penalty",), ("repeat_penalty",), float,
            _positive_penalty, "a number > 0", "Repeat penalty (1.0: off)."),
    Setting("penalty_present", ("--presence-penalty",), ("presence_penalty",), float, _finite,
            "a number", "Presence penalty (0.0: off)."),
    Setting("penalty_freq", ("--frequency-penalty",), ("frequency_penalty",), float, _finite,
            "a number", "Frequency penalty (0.0: off)."),
    Setting("mirostat", ("--mirostat",), ("mirostat",), int, _int_within(0, 2), "0, 1 or 2",
            "Mirostat version (0: off); replaces the chain but logit bias and temperature."),
    Setting("mirostat_eta", ("--mirostat-lr",), ("mirostat_eta",), float, _at_least(0),
            "a number >= 0", "Mirostat learning rate, eta."),
    Setting("mirostat_tau", ("--mirostat-ent",), ("mirostat_tau",), float, _at_least(0),
            "a number >= 0", "Mirostat target entropy, tau."),
    Setting("min_keep", (), ("min_keep",), int, _int_within(0, N_PREDICT_LIMIT),
            "an integer >= 0", "Keep at least this many tokens in truncating stages."),
    Setting("samplers", ("--samplers",), ("samplers",), str, lambda v: True,
            "stage names separated by ';' (or a list)",
            "Stages in order, ';'-separated: " + ";".join(_DEFAULTS["samplers"]) + "."),
    Setting("samplers", ("--sampling-seq", "--sampler-seq"), (), str, lambda v: True,
            "one letter per stage", "Stages in order as letters: edskypmxt (the default)."),
    Setting("logit_bias", ("-l", "--logit-bias"), ("logit_bias",), list, lambda v: True,
            "TOKEN_ID(+|-)BIAS", "Add BIAS to TOKEN_ID's logit (repeatable; -inf: never)."),
    Setting("dry_multiplier", ("--dry-multiplier",), ("dry_multiplier",), float, _finite,
            "a number", "DRY: penalty for continuing a repeat (0.0: off)."),
    Setting("dry_base", ("--dry-base",), ("dry_base",), float, _at_least(1), "a number >= 1",
            "DRY: the penalty is multiplier x base ^ (repeat length - allowed length)."),
    Setting("dry_allowed_length", ("--dry-allowed-length",), ("dry_allowed_length",), int,
            _int_within(1, N_PREDICT_LIMIT), "an integer >= 1",
            "DRY: a token that continues a repeat this long or longer is penalised."),
    Setting("dry_penalty_last_n", ("--dry-penalty-last-n",), ("dry_penalty_last_n",), int,
            _int_within(-1, N_PREDICT_LIMIT), f"an integer in -1..{N_PREDICT_LIMIT}",
            "DRY reads the last N tokens, the prompt's included (0: off, -1: all)."),
    Setting("dry_sequence_breakers", ("--dry-sequence-breaker",), ("dry_sequence_breakers",),
            list, lambda v: True,
            f"a string of 1..{MAX_BREAKER_BYTES} bytes (repeatable; 'none': no breakers)",
            "DRY: a repeat starts over after these strings; the flag replaces the defaults.",
            shown="\\n : \" *"),
    Setting("adaptive_target", ("--adaptive-target",), ("adaptive_target",), float,
            lambda v: is_number(v) and v <= 1, "a number <= 1 (negative: off)",
            "adaptive-p: favour tokens of about this probability; runs last, and only with "
            "adaptive_p in the samplers."),
    Setting("adaptive_decay", ("--adaptive-decay",), ("adaptive_decay",), float,
            _within(0, 0.99), "a number in [0, 0.99]",
            "adaptive-p: its average of chosen tokens' probabilities spans ~1/(1 - decay)."),
)  # fmt: skip

#: request field -> its row
BY_FIELD: dict[str, Setting] = {f: s for s in SETTINGS for f in s.fields}


class SettingError(ValueError):
    """A sampler setting out of range; the message names it as the user wrote it."""


def parse_bias_flag(item: str) -> tuple[int, float]:
    """`-l TOKEN_ID(+|-)BIAS` ("15043+1", "15043-inf", "2-0.5") as (token id, bias)."""
    text = item.strip()
    for i in range(1, len(text)):
        if text[i] in "+-" and text[:i].isdigit():
            try:
                bias = float(text[i:])
            except ValueError:
                break
            if math.isnan(bias) or bias == math.inf:
                break
            return int(text[:i]), bias
    raise SettingError(f"-l/--logit-bias: {item!r} (must be TOKEN_ID(+|-)BIAS, e.g. 15043+1)")


def _object_key_id(key: str) -> int | None:
    """An object key that spells an integer ("15043", " 7", "+2") as that integer; None: the
    key is text."""
    text = key.lstrip()
    body = text[1:] if text[:1] in "+-" else text
    return int(text) if body.isascii() and body.isdigit() else None


def parse_bias_field(value: Any) -> tuple[tuple[int | str, float], ...]:
    """A request's `logit_bias`: OpenAI's object {"15043": -100}, llama-server's list of pairs
    [[15043, -1.5]] where `false` means never. A token may be given as text (a list pair's
    string, an object key that is not an integer): every token of its tokenization is biased
    (specgguf.core.sampler_vocab resolves it once the vocabulary is known)."""
    if value is None or value == [] or value == {}:
        return ()
    if isinstance(value, dict):
        pairs = [(k if (i := _object_key_id(k)) is None else i, b) for k, b in value.items()]
    elif isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value):
        pairs = [(p[0], p[1]) for p in value]
    else:
        raise SettingError("'logit_bias' must be an object {token: bias} or [[token, bias], ...]")
    if len(pairs) > MAX_BIAS:
        raise SettingError(f"'logit_bias' has {len(pairs)} entries (at most {MAX_BIAS})")
    out: list[tuple[int | str, float]] = []
    for tok, bias in pairs:
        if isinstance(tok, str):
            if not tok:
                raise SettingError("'logit_bias': a token's text is empty")
        elif not is_int(tok) or not 0 <= tok < 1 << 31:
            raise SettingError(f"'logit_bias': {tok!r} is not a token id or a text")
        if bias is False:  # never
            out.append((tok, -math.inf))
            continue
        if not is_number(bias):
            raise SettingError(f"'logit_bias': the bias of {tok!r} must be a number or false")
        out.append((tok, float(bias)))
    return tuple(out)


def parse_breakers(values: Any, where: str, *, flag: bool) -> tuple[str, ...]:
    """DRY's sequence breakers: a request's non-empty list of strings, or the values of the
    repeatable flag (escapes such as \\n processed; 'none' clears what came before it)."""
    if flag:
        out: list[str] = []
        for v in values:
            out = [] if v == "none" else [*out, unescape(v)]
    elif isinstance(values, list) and values and all(isinstance(v, str) for v in values):
        out = list(values)
    else:
        raise SettingError(f"{where} must be a non-empty list of strings")
    if len(out) > MAX_ORDER:
        raise SettingError(f"{where}: {len(out)} breakers (at most {MAX_ORDER})")
    for b in out:
        if not 1 <= len(b.encode("utf-8", "surrogatepass")) <= MAX_BREAKER_BYTES:
            raise SettingError(f"{where}: {b!r} (a breaker is 1..{MAX_BREAKER_BYTES} bytes)")
    return tuple(out)


def _order(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, list) and len(value) > MAX_ORDER:
        raise SettingError(f"{where}: {len(value)} names (at most {MAX_ORDER})")
    if isinstance(value, str) and len(value) > 64 * MAX_ORDER:
        raise SettingError(f"{where}: too long")
    if not isinstance(value, str | list):
        raise SettingError(f"{where} must be a string or a list of names")
    try:
        order = parse_order(value)
    except SamplerOrderError as e:
        raise SettingError(f"{where}: {e}") from None
    bad = [NOT_IMPLEMENTED[s] for s in order if s in NOT_IMPLEMENTED]
    if bad:
        raise SettingError(f"{where}: {bad[0]} is not run here")
    return order


def check(row: Setting, value: Any, where: str) -> Any:
    """`value` for `row` as SamplerParams takes it, or SettingError naming `where`."""
    if row.param == "samplers":
        return _order(value, where)
    if row.param == "logit_bias":
        return parse_bias_field(value)
    if row.param == "dry_sequence_breakers":
        return parse_breakers(value, where, flag=False)
    if row.kind is float and is_int(value):
        if not is_number(value):  # an integer past what a float holds (JSON has no limit)
            raise SettingError(f"{where}: {value!r} (must be {row.what})")
        value = float(value)
    if not row.ok(value) or (row.off is not None and not row.off(value)):
        raise SettingError(f"{where}: {value!r} (must be {row.what})")
    return value


def from_request(body: dict) -> dict[str, Any]:
    """The sampler settings a request gives (SamplerParams' fields), checked; `temperature`,
    `top_k`, `top_p` and `min_p` included. Unrun stages' fields must be at their off value."""
    out: dict[str, Any] = {}
    for key, row in BY_FIELD.items():
        v = body.get(key)
        if v is None:
            continue
        if row.param == "samplers":
            out["samplers"] = _order(v, f"'{key}'")
            continue
        try:
            value = check(row, v, key)
        except SettingError:
            if row.kind is list:  # its own message says what is wrong
                raise
            raise SettingError(f"'{key}' must be {row.what}") from None
        if row.param is not None:
            out[row.param] = value
    return out


def from_flags(values: dict[str, Any]) -> dict[str, Any]:
    """SamplerParams' fields from the flags' values (by Setting.name; the flag parameter of
    --sampling-seq is `sampling_seq`, of -l `logit_bias`: a list of TOKEN(+|-)BIAS)."""
    out: dict[str, Any] = {}
    for row in SETTINGS:
        if not row.flags:
            continue
        where = "/".join(row.flags)
        v = values.get(flag_param(row))
        if row.param == "logit_bias":
            out["logit_bias"] = tuple(parse_bias_flag(x) for x in (v or ()))[:MAX_BIAS]
        elif row.param == "dry_sequence_breakers":
            if v:
                out[row.param] = parse_breakers(v, where, flag=True)
        elif row.param == "samplers":
            if v is not None:
                out["samplers"] = _order(v, where)
        elif v is not None:
            value = check(row, v, where)
            if row.param is not None:
                out[row.param] = value
    order = out.get("samplers", _DEFAULTS["samplers"])
    if out.get("adaptive_target", -1.0) >= 0 and "adaptive_p" not in order:
        raise SettingError("--adaptive-target: adaptive-p runs only where adaptive_p is in "
                           "--samplers (or 'a' in --sampling-seq)")  # fmt: skip
    return out


def flag_param(row: Setting) -> str | None:
    """The Typer parameter name of a row's flag (None: a request field only)."""
    if not row.flags:
        return None
    return row.flags[-1].lstrip("-").replace("-", "_") if row.flags[0] == "-l" else (
        row.flags[0].lstrip("-").replace("-", "_")
    )


def params(base: SamplerParams, given: dict[str, Any]) -> SamplerParams:
    """`base` with the settings of `given` (from_request's or from_flags')."""
    return replace(base, **given) if given else base


def markdown_table() -> str:
    """docs/sampling.md's table of every setting, from SETTINGS."""
    lines = [
        "| flag | request field | env | default | values | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for row in SETTINGS:
        flags = ", ".join(f"`{f}`" for f in row.flags) or "-"
        req = ", ".join(f"`{f}`" for f in row.fields) or "-"
        env = f"`{row.env}`" if row.env else "-"
        d = row.value_default
        default = ";".join(d) if isinstance(d, tuple) and d and isinstance(d[0], str) else d
        default = "-" if default in (None, ()) else f"`{row.shown or default}`"
        lines.append(f"| {flags} | {req} | {env} | {default} | {row.what} | {row.help} |")
    return "\n".join(lines) + "\n"
