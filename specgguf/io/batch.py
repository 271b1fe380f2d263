"""Batch mode (`run --jsonl`): JSON Lines in, one JSON object out per line, in input order.

Each input line is `{"prompt": "..."}` or `{"messages": [{"role": ..., "content": ...}, ...]}`,
with optional per-line `n_predict`, `temperature`, `top_k`, `top_p`, `min_p`, `seed` and `id`,
and `grammar` (GBNF text) or `json_schema` (an object) for that line's constrained output.
Blank lines are skipped (they are not JSON Lines records). A line that cannot be answered (not
JSON, not UTF-8, a missing or mistyped field, an unknown key, a prompt longer than the context)
gets an error object in its place and the batch goes on; the exit status tells whether any line
failed (ExitCode.BATCH_PARTIAL).

Every output object carries `line` (1-based input line number) and `id` (the line's `id`, else
null); an error object has `error: {type, code, message}` instead of the generation fields.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from specgguf import interrupts
from specgguf.errors import MAX_TEXT_BYTES, ExitCode, OutputError, SpecggufError
from specgguf.io import json_input, sampler_table
from specgguf.io.output import write_text
from specgguf.io.sampling_fields import FIELDS, is_int

#: per-line keys and what they override on the command line
OVERRIDES = ("n_predict", "temperature", "top_k", "top_p", "min_p", "seed")
#: per-line constraints (at most one): they replace the command line's --grammar / -j
CONSTRAINTS = ("grammar", "json_schema")
#: and every other sampler field of a server request (penalties, logit_bias, samplers, ...)
KNOWN_KEYS = frozenset(
    ("prompt", "messages", "id", *OVERRIDES, *CONSTRAINTS, *sampler_table.BY_FIELD)
)
_FLOATS = frozenset(("temperature", "top_p", "min_p"))  # a JSON 1 is the float 1.0 here

_CODE_NAMES = {
    ExitCode.USAGE: "usage",
    ExitCode.MODEL: "model",
    ExitCode.INCOMPATIBLE: "incompatible",
    ExitCode.PROMPT: "prompt",
    ExitCode.RUNTIME: "runtime",
    ExitCode.INTERRUPTED: "interrupted",
    ExitCode.TERMINATED: "interrupted",
    ExitCode.HANGUP: "interrupted",
}


class BatchLineError(SpecggufError):
    """What is wrong with one input line (exit code PROMPT: the input, not the command)."""

    exit_code = ExitCode.PROMPT

    def __init__(self, message: str, item_id: Any = None) -> None:
        super().__init__(message)
        self.item_id = item_id


@dataclass
class BatchItem:
    line: int  # 1-based line number in the input
    id: Any = None  # str, int or None, echoed back
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    n_predict: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    seed: int | None = None
    grammar: str | None = None
    json_schema: Any = None  # a JSON schema object (or true/false)
    #: the line's sampler settings as SamplerParams' fields (sampler_table.from_request)
    sampling: dict[str, Any] = field(default_factory=dict)

    def overrides(self) -> dict[str, Any]:
        """The per-line settings that were given."""
        return {k: getattr(self, k) for k in OVERRIDES if getattr(self, k) is not None}


@dataclass
class BatchCounts:
    lines: int = 0  # records read (blank lines not counted)
    answered: int = 0
    failed: int = 0
    interrupted: bool = False


def parse_line(text: str | bytes, line: int) -> BatchItem:
    """One JSONL record -> a validated BatchItem; BatchLineError says what is wrong."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BatchLineError(f"not valid UTF-8 (byte {e.start})") from None
    if line == 1:
        text = text.removeprefix("\ufeff")
    try:
        obj = json_input.loads(text)
    except json_input.JsonInputError as e:
        if e.code == "invalid_json":
            raise BatchLineError(f"not JSON: {e}") from None
        item_id = e.value.get("id") if isinstance(e.value, dict) else None
        valid_id = isinstance(item_id, str | int) and not isinstance(item_id, bool)
        valid_id = valid_id and json_input.lone_surrogate_path(item_id) is None
        raise BatchLineError(str(e), item_id if valid_id else None) from None
    if not isinstance(obj, dict):
        raise BatchLineError(f"expected a JSON object, got {type(obj).__name__}")

    item_id = obj.get("id")
    if item_id is not None and not (isinstance(item_id, str) or is_int(item_id)):
        raise BatchLineError('"id" must be a string or an integer')

    def fail(message: str) -> BatchLineError:
        return BatchLineError(message, item_id)

    unknown = sorted(set(obj) - KNOWN_KEYS)
    if unknown:
        raise fail(
            f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
            f"(known: {', '.join(sorted(KNOWN_KEYS))})"
        )
    item = BatchItem(line=line, id=item_id)
    has_prompt, has_messages = "prompt" in obj, "messages" in obj
    if has_prompt == has_messages:
        raise fail('each line needs exactly one of "prompt" or "messages"')
    if has_prompt:
        if not isinstance(obj["prompt"], str):
            raise fail('"prompt" must be a string')
        item.prompt = obj["prompt"]
    else:
        from specgguf.chat.template import validate_messages

        try:
            item.messages = validate_messages(obj["messages"])
        except SpecggufError as e:
            raise fail(str(e)) from None

    def get(key: str, ok: Callable[[Any], bool], what: str) -> Any:
        v = obj.get(key)
        if v is not None and not ok(v):
            raise fail(f'"{key}" must be {what}, got {json.dumps(v)}')
        return v

    for key in OVERRIDES:
        f = FIELDS[key]
        v = get(key, f.ok, f.what)
        setattr(item, key, float(v) if v is not None and key in _FLOATS else v)
    try:
        item.sampling = sampler_table.from_request(obj)
    except sampler_table.SettingError as e:
        raise fail(str(e)) from None
    item.grammar = get("grammar", lambda v: isinstance(v, str), "a string (GBNF)")
    item.json_schema = get(
        "json_schema", lambda v: isinstance(v, dict | bool), "a JSON schema object"
    )
    if item.grammar is not None and item.json_schema is not None:
        raise fail('"grammar" and "json_schema" cannot be combined: give one')
    return item


def error_object(line: int, item_id: Any, err: BaseException) -> dict[str, Any]:
    if isinstance(err, SpecggufError):
        code = int(err.code)
        kind = _CODE_NAMES.get(err.code, "error")
        message = str(err)
    else:  # a bug in specgguf: still one line, and the batch goes on
        code = int(ExitCode.RUNTIME)
        kind = "internal"
        message = f"{type(err).__name__}: {err}"
    return {"id": item_id, "line": line, "error": {"type": kind, "code": code, "message": message}}


def run_batch(
    lines: Iterable[str | bytes],
    answer: Callable[[BatchItem], dict[str, Any]],
    out: TextIO,
    *,
    counts: BatchCounts | None = None,
) -> int:
    """Answer every record of `lines` in order, writing one JSON object per record to `out`
    (flushed per line). `answer` returns the generation fields for a valid item; whatever it
    raises (except KeyboardInterrupt) becomes that line's error object.

    Returns ExitCode.OK, BATCH_PARTIAL when any line failed, or INTERRUPTED when an answer
    reports stop_reason "interrupted" (or Ctrl-C arrives): that line is written, the rest
    is not read.
    """
    c = counts if counts is not None else BatchCounts()
    try:
        for n, raw in enumerate(bounded_lines(lines), start=1):
            if raw is None:  # longer than the bound: the input is not JSON Lines
                c.lines += 1
                c.failed += 1
                too_long = BatchLineError(
                    f"line {n}: longer than {MAX_TEXT_BYTES} bytes; the rest of the input "
                    "is not read"
                )
                _write(out, error_object(n, None, too_long))
                break
            if not raw.strip():
                continue
            c.lines += 1
            if not _answer_line(n, raw, answer, out, c):
                break
    except KeyboardInterrupt:  # between lines (reading the next one): nothing half-written
        c.interrupted = True
    if c.interrupted:
        return int(ExitCode.INTERRUPTED)
    return int(ExitCode.BATCH_PARTIAL) if c.failed else int(ExitCode.OK)


def bounded_lines(lines: Iterable[str | bytes]) -> Iterator[str | bytes | None]:
    """The lines of `lines`; a file (anything with readline) is read at most MAX_TEXT_BYTES
    per line, and a longer line comes out as None, after which nothing more is read (a file
    without newlines, /dev/zero, would otherwise be one line read into memory whole)."""
    readline = getattr(lines, "readline", None)
    if readline is None:
        yield from lines
        return
    while line := readline(MAX_TEXT_BYTES + 1):
        if len(line) > MAX_TEXT_BYTES:
            yield None
            return
        yield line


def _answer_line(
    n: int, raw: str | bytes, answer: Callable[[BatchItem], dict[str, Any]], out: TextIO,
    c: BatchCounts,
) -> bool:
    """Answer record `n` and write its object; False when the batch must stop (interrupted)."""
    item_id: Any = None
    try:
        item = parse_line(raw, n)
        item_id = item.id
        result = answer(item)
    except KeyboardInterrupt:
        c.interrupted = True
        c.failed += 1
        stop = SpecggufError("interrupted", ExitCode(interrupts.exit_code()))
        _write(out, error_object(n, item_id, stop))
        return False
    except OutputError:
        raise  # stdout or --trace failed (a full disk): no later line could be written
    except Exception as err:  # noqa: BLE001 - one bad line never stops the batch
        if isinstance(err, BatchLineError) and err.item_id is not None:
            item_id = err.item_id
        c.failed += 1
        _write(out, error_object(n, item_id, err))
        return True
    c.answered += 1
    _write(out, {"id": item_id, "line": n, **result})
    if result.get("stop_reason") == "interrupted":
        c.interrupted = True
        return False
    return True


def _write(out: TextIO, obj: dict[str, Any]) -> None:
    write_text(out, json.dumps(obj, ensure_ascii=False) + "\n")
