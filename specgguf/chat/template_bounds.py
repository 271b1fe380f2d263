"""A Jinja sandbox that also bounds what a chat template may spend: time, steps, memory, depth.

Chat templates come inside downloaded GGUF files. Jinja's ImmutableSandboxedEnvironment keeps
them away from Python internals, but not from spending without limit: two nested
`range(100000)` loops run for hours, `'x' * 100000000` allocates in a single C call (no Python
hook runs while it does), `range(10**9)` and a recursive macro end in Python exceptions. This
environment puts every way a template can spend behind a check that runs BEFORE the cost:

- steps and time: every call, loop iteration, intercepted operator and output write is one
  step, counted against `max_steps` and a wall-clock deadline (checked at each step);
- object size: an operation whose result would exceed `max_chars` is refused from the sizes of
  its operands before it allocates (`*`, `+`, `%`, `**`, `~`, str.format, replace, join,
  padding, expandtabs, translate, to_bytes, and the filters indent, wordwrap, center, replace,
  join, format, batch, slice, sum); every other call's result is measured after it returns;
- output: what is written into any output buffer (the top level, macro bodies, `{% set %}`
  and `{% filter %}` blocks) counts against `production_factor * max_chars`; the caller stops
  the top-level output itself once it passes `max_chars`;
- depth: nested calls (macros, caller(), recursive loops) deeper than `max_depth` are refused;
- range(): at most `max_range` numbers (Jinja's sandbox allows 100000); lipsum() is removed.

The hooks are attached by rewriting the parsed template before code generation: each loop's
iterable, each output item and each `~` concatenation becomes a call of an environment method
(`nodes.EnvironmentAttribute`: a template cannot name, shadow or reach those). Jinja's
constant folding calls the same wrapped filters at compile time; a refusal there only means
the expression is evaluated (and refused again) at render time.

Pure: jinja2 only. A BoundedSandbox renders one template at a time (`begin`/`end`).
"""

from __future__ import annotations

import functools
import re
import time
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from jinja2 import Undefined, nodes
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

#: characters of rendered prompt allowed per token of context: a token is 3-4 characters of
#: text on average and rarely more than 16 (long runs of spaces), so a prompt past this cannot
#: fit the context anyway
CHARS_PER_TOKEN = 16
#: the output cap when the context size is not known, and the smallest one
DEFAULT_MAX_CHARS = 1 << 20
MIN_MAX_CHARS = 1 << 14


class TemplateBoundsError(Exception):
    """A template passed one of its TemplateLimits; the message says which, in one line."""


@dataclass(frozen=True)
class TemplateLimits:
    max_chars: int = DEFAULT_MAX_CHARS  # the rendered prompt, and any one value built on the way
    seconds: float = 5.0
    max_steps: int = 2_000_000
    max_depth: int = 64
    max_range: int = 10_000
    production_factor: int = 8  # all output buffers together: this many times max_chars
    max_int_bits: int = 1 << 16
    context: int | None = None  # the -c the caps were derived from, for messages

    @classmethod
    def for_context(cls, n_ctx: int | None, **kw: Any) -> TemplateLimits:
        """Caps derived from the context size: CHARS_PER_TOKEN characters per token."""
        if not n_ctx or n_ctx <= 0:
            return cls(**kw)
        return cls(max_chars=max(CHARS_PER_TOKEN * n_ctx, MIN_MAX_CHARS), context=n_ctx, **kw)

    def describe_chars(self) -> str:
        if self.context:
            return (
                f"{self.max_chars} characters ({CHARS_PER_TOKEN} per token of the "
                f"{self.context}-token context)"
            )
        return f"{self.max_chars} characters"


# ---- sizes ----------------------------------------------------------------------------------


def weight(obj: Any, limit: int) -> int:
    """About how many characters `str(obj)` takes, stopping early past `limit`.

    Strings count their length, ints their decimal digits, containers 1 per item plus their
    items (every occurrence: `str` prints shared items again), anything else 1. Iterative (a
    deeply nested value cannot overflow the stack) and at most `limit` + 1 items are visited,
    since each adds at least 1: a value doubled by self-reference stops early."""
    total = 0
    stack = [obj]
    while stack:
        x = stack.pop()
        if isinstance(x, str | bytes | bytearray):
            total += len(x)
        elif isinstance(x, bool) or x is None:
            total += 1
        elif isinstance(x, int):
            total += x.bit_length() // 3 + 1
        elif isinstance(x, dict):
            total += 1 + len(x)
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, list | tuple | set | frozenset):
            total += 1 + len(x)
            stack.extend(x)
        else:
            total += 1
        if total > limit:
            return total
    return total


_DIGITS = re.compile(r"\d+")


def _largest_number(fmt: str, limit: int) -> int:
    """The largest decimal number written in a format string (a width or precision)."""
    best = 0
    for m in _DIGITS.finditer(fmt):
        if len(m.group()) > len(str(limit)):
            return limit + 1
        best = max(best, int(m.group()))
    return best


def _ints(values: Iterable[Any]) -> list[int]:
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool)]


# ---- the environment ------------------------------------------------------------------------


class _Budget:
    __slots__ = ("limits", "deadline", "steps", "produced", "depth")

    def __init__(self, limits: TemplateLimits) -> None:
        self.limits = limits
        self.deadline = time.monotonic() + limits.seconds
        self.steps = 0
        self.produced = 0
        self.depth = 0


class _Ticking:
    """An iterable as a for loop sees it, one step per item. len() is the source's, so that
    loop.length and loop.last behave as on the original (TypeError when it has none)."""

    __slots__ = ("_source", "_it", "_step")

    def __init__(self, source: Any, step: Callable[[], None]) -> None:
        self._source = source
        self._it = iter(source)
        self._step = step

    def __iter__(self) -> _Ticking:
        return self

    def __next__(self) -> Any:
        self._step()
        return next(self._it)

    def __len__(self) -> int:
        return len(self._source)


def _env_call(name: str, args: list[nodes.Expr], lineno: int) -> nodes.Call:
    target = nodes.EnvironmentAttribute(name, lineno=lineno)
    return nodes.Call(target, args, [], None, None, lineno=lineno)


class _Instrument(NodeTransformer):
    """Route loops, outputs and `~` through the environment's counting methods."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        node = self.generic_visit(node)
        node.iter = _env_call("bounded_iter", [node.iter], node.lineno)
        return node

    def visit_Output(self, node: nodes.Output) -> nodes.Node:
        node = self.generic_visit(node)
        node.nodes = [
            _env_call(
                "bounded_out",
                [nodes.Const(c.data, lineno=c.lineno) if isinstance(c, nodes.TemplateData) else c],
                c.lineno,
            )
            for c in node.nodes
        ]
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        node = self.generic_visit(node)
        return _env_call("bounded_concat", list(node.nodes), node.lineno)


# str/bytes methods whose result can be much larger than their inputs
_GROWING_METHODS = frozenset(
    ("replace", "join", "expandtabs", "ljust", "rjust", "center", "zfill", "translate")
)


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """ImmutableSandboxedEnvironment + TemplateLimits (see the module docstring)."""

    intercepted_binops = frozenset(("*", "+", "%", "**"))

    def __init__(self, *args: Any, limits: TemplateLimits | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.limits = limits or TemplateLimits()
        self._budget: _Budget | None = None
        self.globals["range"] = self._range
        self.globals.pop("lipsum", None)  # lipsum(n, max=...) writes n * max words
        for name, f in list(self.filters.items()):
            self.filters[name] = self._bounded_filter(name, f)

    #: the list methods a template may call on a list it made itself although they change
    #: it: Kimi K2's templates queue call ids with them. Each call is a step, so a list grows
    #: by at most max_steps values, each of them bounded. The lists the caller gives (the
    #: messages, the tools) are GivenLists, which stay unchangeable
    LIST_MUTATORS = frozenset(("append", "pop"))

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if type(obj) is list and attr in self.LIST_MUTATORS:
            return True
        return super().is_safe_attribute(obj, attr, value)

    def add_filter(self, name: str, f: Callable[..., Any]) -> None:
        """Register a filter behind the same step and size checks as Jinja's own."""
        self.filters[name] = self._bounded_filter(name, f)

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = instrument(super()._parse(source, name, filename))
        tree.set_environment(self)
        return tree

    # -- one render ---------------------------------------------------------------------------

    def begin(self, limits: TemplateLimits | None = None) -> None:
        self._budget = _Budget(limits or self.limits)

    def end(self) -> None:
        self._budget = None

    @property
    def _cap(self) -> int:
        return (self._budget.limits if self._budget else self.limits).max_chars

    def _step(self) -> None:
        b = self._budget
        if b is None:  # compile-time constant folding: sizes are still checked
            return
        b.steps += 1
        if b.steps > b.limits.max_steps:
            raise TemplateBoundsError(
                f"more than {b.limits.max_steps} steps (calls, loop iterations, operations)"
            )
        if time.monotonic() > b.deadline:
            raise TemplateBoundsError(f"rendering took more than {b.limits.seconds:g} s")

    def _refuse_size(self, what: str, size: int) -> None:
        if size > self._cap:
            limits = self._budget.limits if self._budget else self.limits
            raise TemplateBoundsError(
                f"{what} would be about {size} characters, more than {limits.describe_chars()}"
            )

    def _check_result(self, what: str, value: Any) -> Any:
        cap = self._cap
        if isinstance(value, str | bytes):
            if len(value) > cap:
                self._refuse_size(what, len(value))
        elif isinstance(value, list | tuple | dict | set | frozenset | int):
            self._refuse_size(what, weight(value, cap))
        return value

    # -- hooks the rewritten template calls ---------------------------------------------------

    def bounded_iter(self, iterable: Any) -> _Ticking:
        return _Ticking(iterable, self._step)

    def bounded_out(self, value: Any) -> str:
        self._step()
        if isinstance(value, str):
            s = value
        else:
            self._refuse_size("an output value", weight(value, self._cap))
            s = str(value)
        b = self._budget
        if b is not None:
            b.produced += len(s)
            cap = b.limits.production_factor * b.limits.max_chars
            if b.produced > cap:
                raise TemplateBoundsError(
                    f"wrote more than {cap} characters (output, macros and blocks together)"
                )
        return s

    def bounded_concat(self, *parts: Any) -> str:
        self._step()
        cap = self._cap
        self._refuse_size("a ~ concatenation", sum(weight(p, cap) for p in parts))
        return "".join(map(str, parts))

    def _range(self, *args: Any) -> range:
        self._step()
        rng = range(*args)
        limit = (self._budget.limits if self._budget else self.limits).max_range
        if len(rng) > limit:
            raise TemplateBoundsError(f"range() of {len(rng)} numbers, more than {limit}")
        return rng

    def _bounded_list(self, iterable: Any, what: str) -> list[Any]:
        """Materialise an iterable (join's, sum's) one counted step per item, its size capped."""
        if isinstance(iterable, list | tuple):
            self._refuse_size(what, weight(iterable, self._cap))
            return list(iterable)
        out, size, cap = [], 0, self._cap
        for item in iterable:
            self._step()
            out.append(item)
            size += 1 + weight(item, cap)
            self._refuse_size(what, size)
        return out

    # -- operators ----------------------------------------------------------------------------

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        self._step()
        if operator == "+" and (isinstance(left, str) or isinstance(right, str)):
            # a missing value (an undefined attribute, None) next to a string is "", as
            # llama-server's template engine has it: GPT-OSS' writes "// " + tool.description
            # for tools that have none
            left, right = ("" if _missing(v) else v for v in (left, right))
        cap = self._cap
        limits = self._budget.limits if self._budget else self.limits
        ints = isinstance(left, int) and isinstance(right, int)
        bits = 0  # of an integer result, bounded before Python computes it
        if operator == "*" and ints:
            bits = left.bit_length() + right.bit_length()
        elif operator == "*":
            seq, n = (left, right) if isinstance(right, int) else (right, left)
            if isinstance(n, int) and isinstance(seq, str | bytes | list | tuple):
                self._refuse_size("a repetition", weight(seq, cap) * max(n, 0))
        elif operator == "+" and not ints:
            self._refuse_size("a concatenation", weight(left, cap) + weight(right, cap))
        elif operator == "**" and ints and right > 0 and abs(left) > 1:
            bits = left.bit_length() * right
        elif operator == "%" and isinstance(left, str | bytes):
            self._refuse_size("a % format", self._percent_size(left, right))
        if bits > limits.max_int_bits:
            raise TemplateBoundsError(f"an integer of more than {limits.max_int_bits} bits")
        return self._check_result(f"the result of {operator}", super().call_binop(
            context, operator, left, right
        ))  # fmt: skip

    def _percent_size(self, fmt: str | bytes, args: Any) -> int:
        cap = self._cap
        text = fmt.decode("latin-1") if isinstance(fmt, bytes) else fmt
        width = _largest_number(text, cap)
        if "*" in text:
            values = args if isinstance(args, tuple) else (args,)
            width = max([width, *(abs(i) for i in _ints(values))])
        if width > cap:
            return width
        return len(text) + text.count("%") * (width + weight(args, cap))

    # -- calls --------------------------------------------------------------------------------

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        self = __self
        self._step()
        if isinstance(__obj, LoopContext) and args:  # loop(children) in a recursive loop
            args = (self.bounded_iter(args[0]), *args[1:])
        else:
            args = self._precheck_method(__obj, args, kwargs)
        b = self._budget
        if b is not None:
            b.depth += 1
            if b.depth > b.limits.max_depth:
                b.depth -= 1
                raise TemplateBoundsError(
                    f"calls nested more than {b.limits.max_depth} deep (a recursive macro?)"
                )
        try:
            rv = super().call(__context, __obj, *args, **kwargs)
        finally:
            if b is not None:
                b.depth -= 1
        name = getattr(__obj, "__name__", None) or type(__obj).__name__
        return self._check_result(f"the result of {name}()", rv)

    def _precheck_method(self, obj: Any, args: tuple, kwargs: dict) -> tuple:
        """Refuse a str/bytes/int method call whose result would be too large, from its inputs.
        Returns the arguments to call with (join's iterable materialised)."""
        cap = self._cap
        wrapped = getattr(obj, "__wrapped__", None)  # the sandbox's str.format wrapper
        name = getattr(obj, "__name__", "")
        if name in ("format", "format_map") and isinstance(getattr(wrapped, "__self__", None), str):
            fmt = wrapped.__self__
            width = max([_largest_number(fmt, cap), *map(abs, _ints([*args, *kwargs.values()]))])
            if width > cap:
                self._refuse_size("a str.format", width)
            fields = fmt.count("{")
            size = weight(list(args), cap) + weight(kwargs, cap)
            self._refuse_size("a str.format", len(fmt) + fields * (width + size))
            return args
        if not isinstance(obj, types.BuiltinMethodType | types.MethodType):
            return args
        owner = getattr(obj, "__self__", None)
        if isinstance(owner, int) and not isinstance(owner, bool) and name == "to_bytes":
            length = args[0] if args else kwargs.get("length", 1)
            if isinstance(length, int):
                self._refuse_size("int.to_bytes", length)
            return args
        if not isinstance(owner, str | bytes | bytearray) or name not in _GROWING_METHODS:
            return args
        n = len(owner)
        if name == "replace" and len(args) >= 2:
            old, new = args[0], args[1]
            if isinstance(old, str | bytes) and isinstance(new, str | bytes):
                hits = owner.count(old) if old else n + 1
                if len(args) > 2 and isinstance(args[2], int) and args[2] >= 0:
                    hits = min(hits, args[2])
                self._refuse_size("a replace()", n + hits * max(len(new) - len(old), 0))
        elif name == "join" and args:
            items = self._bounded_list(args[0], "a join()")
            self._refuse_size("a join()", weight(items, cap) + n * max(len(items) - 1, 0))
            return (items, *args[1:])
        elif name == "expandtabs":
            tab = args[0] if args else kwargs.get("tabsize", 8)
            if isinstance(tab, int):
                self._refuse_size("an expandtabs()", n * max(tab, 1))
        elif name == "translate" and args and isinstance(args[0], dict):
            longest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
            self._refuse_size("a translate()", n * max(longest, 1))
        else:  # ljust, rjust, center, zfill
            width = args[0] if args else kwargs.get("width", 0)
            if isinstance(width, int):
                self._refuse_size(f"a {name}()", max(width, n))
        return args

    # -- filters ------------------------------------------------------------------------------

    def _bounded_filter(self, name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        """`f` with a step, a size estimate before it runs (for the filters that can grow
        their input many times over) and a size check of its result."""
        offset = 1 if getattr(f, "jinja_pass_arg", None) is not None else 0
        pre = _FILTER_PRECHECKS.get(name)

        @functools.wraps(f)  # keeps jinja_pass_arg (pass_context etc.)
        def bounded(*args: Any, **kwargs: Any) -> Any:
            self._step()
            if pre is not None and len(args) > offset:
                head, value, rest = args[:offset], args[offset], args[offset + 1 :]
                value = pre(self, value, rest, kwargs)
                args = (*head, value, *rest)
            rv = f(*args, **kwargs)
            if isinstance(rv, Iterator):  # lazy (map, select, batch, ...): counted when consumed
                return rv
            return self._check_result(f"the {name} filter", rv)

        return bounded


def _arg(rest: tuple, kwargs: dict, i: int, key: str, default: Any) -> Any:
    return rest[i] if len(rest) > i else kwargs.get(key, default)


def _pre_indent(env: BoundedSandbox, value: Any, rest: tuple, kwargs: dict) -> Any:
    width = _arg(rest, kwargs, 0, "width", 4)
    w = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
    s = str(value) if isinstance(value, str) else ""
    env._refuse_size("an indent", len(s) + (s.count("\n") + 1) * max(w, 0))
    return value


def _pre_wordwrap(env: BoundedSandbox, value: Any, rest: tuple, kwargs: dict) -> Any:
    wrap = _arg(rest, kwargs, 2, "wrapstring", None)
    if isinstance(value, str):
        n_wrap = len(wrap) if isinstance(wrap, str) else 1
        env._refuse_size("a wordwrap", len(value) * (1 + n_wrap))
    return value


def _pre_center(env: BoundedSandbox, value: Any, rest: tuple, kwargs: dict) -> Any:
    width = _arg(rest, kwargs, 0, "width", 80)
    if isinstance(width, int):
        env._refuse_size("a center", width)
    return value


def _pre_replace(env: BoundedSandbox, value: Any, rest: tuple, kwargs: dict) -> Any:
    old, new = _arg(rest, kwargs, 0, "old", ""), _arg(rest, kwargs, 1, "new", "")
    count = _arg(rest, kwargs, 2, "count", None)
    if isinstance(value, str) and isinstance(old, str) and isinstance(new, str):
        hits = value.count(old) if old else len(value) + 1
        if isinstance(count, int) and count >= 0:
            hits = min(hits, count)
        env._refuse_size("a replace", len(value) + hits * max(len(new) - len(old), 0))
    return value


def _pre_join(env: BoundedSandbox, value: Any, rest: tuple, kwargs: dict) -> Any:
    sep = _arg(rest, kwargs, 0, "d", "")
    items = env._bounded_list(value, "a join")
    n_sep = len(sep) if isinstance(sep, str) else 0
    env._refuse_size("a join", weight(items, env._cap) + n_sep * max(len(items) - 1, 0))
    return items


def _pre_format(env: BoundedSandbox, value: Any, rest: tuple, kwargs: dict) -> Any:
    if isinstance(value, str):
        env._refuse_size("a format", env._percent_size(value, rest or kwargs))
    return value


def _pre_count(key: str, i: int) -> Callable[..., Any]:
    def check(env: BoundedSandbox, value: Any, rest: tuple, kwargs: dict) -> Any:
        n = _arg(rest, kwargs, i, key, 0)
        if isinstance(n, int):
            env._refuse_size(f"a {key} of {n}", n)
        return value

    return check


class GivenList(list):
    """A list the caller gave the template (see BoundedSandbox.LIST_MUTATORS)."""


def given(value: Any) -> Any:
    """`value` with every list in it a GivenList (dicts copied on the way)."""
    if isinstance(value, list):
        return GivenList(given(v) for v in value)
    if isinstance(value, dict):
        return {k: given(v) for k, v in value.items()}
    return value


def _missing(value: Any) -> bool:
    return value is None or isinstance(value, Undefined)


def _pre_tojson(env: BoundedSandbox, value: Any, rest: tuple, kwargs: dict) -> Any:
    indent = _arg(rest, kwargs, 1, "indent", None)  # tojson(x, ensure_ascii, indent, ...)
    size = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
    if size > 64:  # every nesting level repeats it on every line
        raise TemplateBoundsError(f"tojson indent of {size}, more than 64")
    if isinstance(value, Iterator):  # `tools | map(...) | tojson`: the items, as a list
        return env._bounded_list(value, "a tojson")
    return value


def _pre_sum(env: BoundedSandbox, value: Any, rest: tuple, kwargs: dict) -> Any:
    start = _arg(rest, kwargs, 1, "start", 0)
    if isinstance(start, int | float):
        return value
    items = env._bounded_list(value, "a sum")  # summing lists copies quadratically
    if len(items) > 1000:
        raise TemplateBoundsError(f"a sum of {len(items)} sequences, more than 1000")
    return items


_FILTER_PRECHECKS: dict[str, Callable[..., Any]] = {
    "indent": _pre_indent,
    "wordwrap": _pre_wordwrap,
    "center": _pre_center,
    "replace": _pre_replace,
    "join": _pre_join,
    "format": _pre_format,
    "batch": _pre_count("linecount", 0),
    "slice": _pre_count("slices", 0),
    "sum": _pre_sum,
    "truncate": _pre_count("length", 0),
    "tojson": _pre_tojson,
}


def instrument(tree: nodes.Template) -> nodes.Template:
    """The parsed template with loops, outputs and `~` routed through the bounded hooks."""
    return _Instrument().visit(tree)
