"""Hostile chat templates end within bounds, in one line, with a documented exit code; real
templates render exactly as Jinja's plain immutable sandbox renders them.

In-process: each hostile template against ChatTemplate. Through the CLI: a tiny GGUF built
with each hostile template, `specgguf run --chat` in a subprocess (bounded wall time, the
child's own peak RSS from os.wait4) and `specgguf check` flagging it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specgguf.chat.template import CHATML_TEMPLATE, ChatTemplate, ChatTemplateError, _tojson
from specgguf.chat.template_bounds import CHARS_PER_TOKEN, TemplateLimits
from specgguf.errors import ExitCode
from specgguf.modelfiles.gguf_info import read_gguf_info
from tests.gguf_factory import QWEN_15, need_models
from tests.test_chat import HF_STYLE
from tests.tiny_models import DEFAULT_TEMPLATE, TARGET_SEED, build_tiny_model

SPECGGUF = str(Path(sys.executable).with_name("specgguf"))
QWEN25_TEMPLATE = (Path(__file__).parent / "data" / "qwen2.5-instruct.jinja").read_text()
USER_HI = [{"role": "user", "content": "hi"}]
RSS_BOUND = 1536 * 2**20  # 1.5 GiB; a tiny-model run peaks near 150 MiB

#: name -> (template, exit code of `run --chat`, words the one error line contains)
HOSTILE = {
    # two nested range(100000) loops: hours of looping before
    "nested_100k": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        ExitCode.PROMPT, "range()",
    ),
    # within the range cap, but 10**8 iterations: the step budget stops it (or, on a loaded
    # machine, the deadline first: both bounds say "stopped")
    "nested_10k": (
        "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}",
        ExitCode.PROMPT, "stopped",
    ),
    # one C call that allocated 100 MB (and gigabytes when tokenized)
    "repeat": ("{{ 'x' * 100000000 }}", ExitCode.PROMPT, "repetition"),
    "range_1e9": ("{% for i in range(10**9) %}{{ i }}{% endfor %}", ExitCode.PROMPT, "range()"),
    "recursive_macro": (
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", ExitCode.PROMPT, "nested",
    ),
    # doubling a string 60 times, by ~ and by +
    "doubling": (
        "{% set ns = namespace(s='xx') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}{{ ns.s }}",
        ExitCode.PROMPT, "concatenation",
    ),
    # a macro body that writes 10**4 copies of its argument, nested
    "macro_output": (
        "{% macro m(s) %}{% for i in range(10000) %}{{ s }}{% endfor %}{% endmacro %}"
        "{% set ns = namespace(s='x' * 1000) %}{% for i in range(100) %}{% set ns.s = m(ns.s) %}"
        "{% endfor %}",
        ExitCode.PROMPT, "wrote more than",
    ),
    "huge_output": (
        "{% for i in range(10000) %}{{ 'x' * 10000 }}{% endfor %}", ExitCode.PROMPT, "longer than",
    ),
    # deep nesting: beyond what Jinja's parser and Python's compiler take (compile error: the
    # template is part of the model file, exit 3)
    "deep_nesting": (
        "{% if true %}" * 300 + "x" + "{% endif %}" * 300, ExitCode.MODEL, "nested too deeply",
    ),
    "deep_parens": ("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", ExitCode.MODEL, "nested"),
    # a 100k-item list literal: compiling it took over 20 s and 400 MB; refused after lexing
    "huge_source": ("{{ [" + "1," * 100000 + "1] }}", ExitCode.MODEL, "too large to compile"),
}  # fmt: skip

#: more ways to allocate in one call, each refused before it allocates
ONE_CALL_ALLOCATIONS = [
    "{{ ('x' * 10000).replace('x', 'y' * 10000) }}",
    "{{ 'x'|center(1000000000) }}",
    "{{ 'x'.ljust(1000000000) }}",
    "{{ '%01000000000d' % 1 }}",
    "{{ '{:>1000000000}'.format(1) }}",
    "{{ ('x' * 10000).join(['y' * 100] * 1000) }}",
    "{{ ('a\n' * 10000)|indent(100000) }}",
    "{{ (1).to_bytes(1000000000, 'big') }}",
    "{% set ns = namespace(n=10) %}{% for i in range(40) %}{% set ns.n = ns.n * ns.n %}"
    "{% endfor %}",
    "{{ [1]|batch(1000000000, 'x')|list }}",
    "{% set l = ['x' * 60000] * 60000 %}{{ l }}",
    "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}",
]


def _render(src: str, limits: TemplateLimits | None = None, code=ExitCode.USAGE) -> str:
    t = ChatTemplate.compile(src, "test", limits=limits or TemplateLimits.for_context(4096),
                             error_code=code)  # fmt: skip
    return t.render(USER_HI)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_template_stops_in_one_line(name):
    src, code, words = HOSTILE[name]
    t0 = time.monotonic()
    with pytest.raises(ChatTemplateError) as err:
        _render(src, code=ExitCode.MODEL)
    assert time.monotonic() - t0 < 20
    assert err.value.code == code and words in str(err.value), str(err.value)
    assert "\n" not in str(err.value) and len(str(err.value)) < 400


@pytest.mark.parametrize("src", ONE_CALL_ALLOCATIONS)
def test_one_call_allocations_are_refused_before_allocating(src):
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    with pytest.raises(ChatTemplateError) as err:
        _render(src)
    assert err.value.code == ExitCode.PROMPT and "\n" not in str(err.value)
    assert time.monotonic() - t0 < 20
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    assert grown < 200 * 2**20, f"peak RSS grew by {grown >> 20} MiB"


def test_deadline_stops_a_slow_template():
    """With a step budget too large to matter, the wall-clock deadline ends it."""
    src = "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}"
    t0 = time.monotonic()
    with pytest.raises(ChatTemplateError, match="took more than 0.3 s"):
        _render(src, TemplateLimits(seconds=0.3, max_steps=10**12))
    assert time.monotonic() - t0 < 10


def test_output_cap_follows_the_context():
    src = "{{ 'x' * 20000 }}"  # 20000 characters
    assert len(_render(src, TemplateLimits.for_context(4096))) == 20000  # cap 65536
    with pytest.raises(ChatTemplateError, match="longer than|would be about"):
        _render(src, TemplateLimits.for_context(1024))  # cap 16384
    assert TemplateLimits.for_context(2048).max_chars == CHARS_PER_TOKEN * 2048
    assert TemplateLimits.for_context(None).max_chars == TemplateLimits().max_chars


# -- negative controls: real templates render exactly as before -------------------------------


def _reference_render(src: str, messages, **kw) -> str:
    """What chat.py rendered before the bounds: Jinja's immutable sandbox, same settings."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from specgguf.chat.template import _raise_exception, generation_block

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False,
        extensions=["jinja2.ext.loopcontrols", generation_block()],
    )  # fmt: skip
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    return env.from_string(src).render(messages=messages, **kw)


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather <now> & \"here\"",
    "parameters": {"type": "object", "properties": {"city": {"type": "string",
                   "enum": ["Paris", "Zürich"]}}, "required": ["city"]}}}]  # fmt: skip
CONVERSATIONS = [
    USER_HI,
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi ü <b>"},
     {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"}],
    [{"role": "user", "content": "Weather in Paris?"},
     {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
     {"role": "tool", "content": "{\"t\": 20}", "name": "get_weather"},
     {"role": "user", "content": "x" * 30000}],
]  # fmt: skip


@pytest.mark.parametrize(
    "src", [QWEN25_TEMPLATE, CHATML_TEMPLATE, DEFAULT_TEMPLATE, HF_STYLE],
    ids=["qwen2.5", "chatml", "tiny-default", "hf-style"],
)  # fmt: skip
def test_real_templates_render_exactly_as_before(src):
    for messages in CONVERSATIONS:
        if src == HF_STYLE and len(messages) > 3:
            continue  # that template insists on alternating roles
        for extra in ({}, {"tools": TOOLS}):
            for agp in (True, False):
                kw = dict(add_generation_prompt=agp, bos_token="<s>", eos_token="</s>", **extra)
                want = _reference_render(src, messages, **kw)
                t = ChatTemplate.compile(src, "t", bos_token="<s>", eos_token="</s>",
                                         limits=TemplateLimits.for_context(4096))  # fmt: skip
                assert t.render(messages, add_generation_prompt=agp, **extra) == want


@pytest.mark.real
def test_pulled_qwen_template_renders_exactly_as_before():
    need_models(QWEN_15)
    info = read_gguf_info(QWEN_15)
    assert info.chat_template
    for messages in CONVERSATIONS:
        for extra in ({}, {"tools": TOOLS}):
            want = _reference_render(info.chat_template, messages, add_generation_prompt=True,
                                     bos_token="", eos_token="", **extra)  # fmt: skip
            t = ChatTemplate.compile(info.chat_template, "gguf",
                                     limits=TemplateLimits.for_context(4096))  # fmt: skip
            assert t.render(messages, **extra) == want


# -- through the CLI --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    return {
        name: build_tiny_model(d / f"{name}.gguf", seed=TARGET_SEED, chat_template=src)
        for name, (src, _, _) in HOSTILE.items()
    }


def _vm_hwm(pid: int) -> int | None:
    """The process's own peak RSS so far (Linux /proc/PID/status VmHWM), in bytes."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def run_measured(cmd: list[str], tmp_path: Path, timeout: float = 60.0):
    """(exit status, stdout, stderr, the child's own peak RSS in bytes, seconds).

    The peak is the child's VmHWM, polled while it runs: the rusage wait4 returns counts, on
    Linux, the parent's RSS at fork time into the child's ru_maxrss (exec records the old
    address space's high-water mark), so once this test process has mapped a real model (an
    earlier `real` test) every child would look gigabytes large. wait4's figure is used only
    where /proc cannot be read."""
    out_p, err_p = tmp_path / "out", tmp_path / "err"
    peak: int | None = None
    with open(out_p, "wb") as out, open(err_p, "wb") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        while True:
            hwm = _vm_hwm(proc.pid)
            if hwm is not None:
                peak = max(peak or 0, hwm)
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                proc.kill()
                os.wait4(proc.pid, 0)
                proc.returncode = -9
                pytest.fail(f"still running after {timeout} s: {cmd}")
            time.sleep(0.02)
        elapsed = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    rss = peak if peak is not None else usage.ru_maxrss * 1024
    return proc.returncode, out_p.read_text(), err_p.read_text(), rss, elapsed


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_run_chat_with_hostile_gguf_template_is_bounded(name, hostile_models, tmp_path):
    _, code, words = HOSTILE[name]
    cmd = [SPECGGUF, "run", "-m", str(hostile_models[name]), "--chat", "-p", "hi", "-n", "4",
           "-t", "1", "-fa", "off", "--temp", "0"]  # fmt: skip
    rc, out, err, rss, seconds = run_measured(cmd, tmp_path)
    assert rc == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: chat template from the target GGUF")
    assert words in lines[0] and "Traceback" not in err and out == ""
    assert rss < RSS_BOUND, f"peak RSS {rss >> 20} MiB"
    assert seconds < 60


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_check_flags_hostile_template(name, hostile_models, tmp_path):
    rc, out, err, rss, _ = run_measured(
        [SPECGGUF, "check", "-m", str(hostile_models[name])], tmp_path
    )
    assert rc == ExitCode.PROMPT, (out, err)
    assert "chat template fails" in out and "Traceback" not in out + err
    assert rss < RSS_BOUND


def test_check_passes_a_good_template(tiny_target, capsys):
    import json

    from specgguf_cli.app import run_cli

    assert run_cli(["check", "-m", str(tiny_target), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)["target"]["chat_template_render"]
    assert r["ok"] is True and r["error"] is None and r["chars"] > 0
    assert run_cli(["check", "-m", str(tiny_target)]) == 0
    assert "renders" in capsys.readouterr().out


def test_run_chat_with_a_good_template_still_works(tiny_target, capsys):
    """Negative control for the CLI test: the tiny model's ChatML template renders and the
    run generates."""
    from specgguf_cli.app import run_cli

    code = run_cli(["run", "-m", str(tiny_target), "--chat", "-p", "hi", "-n", "4", "-t", "1",
                    "-fa", "off", "--temp", "0", "-q"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
