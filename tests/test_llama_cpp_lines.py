"""Real llama.cpp command lines (tests/data/llama_cpp_lines.txt: public scripts, Dockerfiles,
compose files, systemd units, tutorials) with `specgguf` put in front: each is read by the
command its program maps to (llama-server: serve; llama-cli, llama-completion: run) and
reaches the point where the model pair would load, with the model it names (a file, -hf
through a loopback stand-in of the Hub, -mu from a loopback server) and its -c, -b, -ub.
No model is loaded."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
from hub_standin import HubStandIn, Repo, point_at
from load_stop import STOPPED, stop_at_load
from specgguf_cli.app import run_cli

from specgguf.flag_table.table import MODEL_PRESETS
from specgguf.flag_table.vendored import PROGRAM_COMMANDS

pytest.importorskip("huggingface_hub")

LINES = Path(__file__).parent / "data" / "llama_cpp_lines.txt"
ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")
HF_FLAGS = ("-hf", "-hfr", "--hf-repo")
TINY = b"GGUF" + bytes(64)  # what the stand-in serves: never loaded (the command stops first)


#: what a line carries that specgguf does not take yet, and why (each such line is expected to
#: fail, strictly: one that starts passing must leave this table)
NOT_YET: dict[str, str] = {}


def _lines() -> list[str]:
    return [raw for raw in LINES.read_text().splitlines() if raw and not raw.startswith("#")]


def _cases() -> list:
    cases = []
    for line in _lines():
        why = [reason for flag, reason in NOT_YET.items() if flag in line.split()]
        marks = [pytest.mark.xfail(reason=why[0], strict=True)] if why else []
        cases.append(pytest.param(line, marks=marks, id=line[:60]))
    return cases


def _words(line: str) -> tuple[dict[str, str], str, list[str]]:
    """The line's environment, its specgguf command, and its arguments."""
    words = shlex.split(line)
    env = {}
    while ENV.match(words[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    return env, PROGRAM_COMMANDS[Path(words[0]).name], words[1:]


def _repos() -> dict[str, set[str]]:
    """Each -hf repository the lines (and the model presets) name, with the quant tags asked."""
    repos: dict[str, set[str]] = {}
    named = [w for line in _lines() for w in [*_words(line)[2], ""]]
    named += [w for p in MODEL_PRESETS.values() for w in p.flags]
    for flag, value in zip(named, named[1:], strict=False):
        if flag in HF_FLAGS:
            repo, _, tag = value.partition(":")
            repos.setdefault(repo, set()).add(tag or "Q4_K_M")
    return repos


@pytest.fixture(scope="module")
def hub():
    files = {}
    for repo, tags in _repos().items():
        name = repo.split("/")[1].removesuffix("-GGUF")
        files[repo] = Repo({f"{name}-{t}.gguf": TINY for t in tags})
    for preset in MODEL_PRESETS.values():
        if preset.file:
            files[preset.repo].files[preset.file] = TINY
    files["u/tiny-GGUF"] = Repo({"tiny-Q4_K_M.gguf": TINY})  # -mu's address
    standin = HubStandIn(repos=files).start()
    yield standin
    standin.stop()


@pytest.fixture
def places(hub, tmp_path, monkeypatch, tiny_target, tiny_draft):
    point_at(hub, monkeypatch, tmp_path)
    for name in [n for n in os.environ if n.startswith("LLAMA_ARG_")]:
        monkeypatch.delenv(name)
    models = tmp_path / "models"
    models.mkdir()
    (models / "a.gguf").write_bytes(Path(tiny_target).read_bytes())
    text = tmp_path / "prompt.txt"
    text.write_text("User: hello\nBob:")
    grammar = tmp_path / "g.gbnf"
    grammar.write_text('root ::= "yes" | "no"\n')
    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    return {"MODEL": str(tiny_target), "DRAFT": str(tiny_draft), "FILE": str(text),
            "GRAMMAR": str(grammar), "TEMPLATE": str(template), "DIR": str(models),
            "CACHE": str(tmp_path / "prompt.cache"),
            "URL": f"{hub.endpoint}/u/tiny-GGUF/resolve/main/tiny-Q4_K_M.gguf"}  # fmt: skip


def _fill(word: str, places: dict[str, str]) -> str:
    return re.sub(r"\{([A-Z]+)\}", lambda m: places[m.group(1)], word)


def _value(args: list[str], *names: str) -> str | None:
    for flag, value in zip(args, args[1:], strict=False):
        if flag in names:
            return value
    return None


@pytest.mark.parametrize("line", _cases())
def test_real_line_reaches_the_load(line: str, places, tmp_path, monkeypatch, capsys) -> None:
    env, command, args = _words(line)
    args = [_fill(w, places) for w in args]
    for name, value in env.items():
        monkeypatch.setenv(name, _fill(value, places))
    monkeypatch.chdir(tmp_path)  # --log-file and the like write here
    seen = stop_at_load(monkeypatch, tmp_path)
    # stdin closed: an interactive line must stop at the load, not wait for a user
    monkeypatch.setattr("sys.stdin", open(os.devnull))  # noqa: SIM115
    code = run_cli([command, *args])
    err = capsys.readouterr().err
    assert code == STOPPED, err
    options = seen[-1]
    model = _value(args, "-m", "--model") or env.get("LLAMA_ARG_MODEL")
    if model is not None:
        assert str(options.model) == _fill(model, places)
    elif set(args) & {*HF_FLAGS, "-mu", "--model-url", *MODEL_PRESETS}:  # downloaded
        assert options.model.read_bytes() == TINY
    for names, field in ((("-c", "--ctx-size"), "n_ctx"), (("-b", "--batch-size"), "n_batch"),
                         (("-ub", "--ubatch-size"), "n_ubatch")):  # fmt: skip
        given = _value(args, *names)
        if given is not None and field != "n_ubatch":
            assert getattr(options, field) == int(given)
        elif given is not None:  # as given (capped at -b when the contexts are made)
            assert options.n_ubatch == int(given)
