"""The corpus of reconstructed real-world files (tests/data/migrate): `--write` on each gives
exactly the text in tests/data/migrate/expected/ (no file there: the text stays as it is), the
result still parses as what it is, and
`--check` afterwards passes or names one of the fixed reasons (specgguf.migrate.reasons) for
each line it still reports.

The draft models the files name are never here, as in a real repository: the real drafter
reader runs, and the assumption (a plain draft model unless the name says otherwise) is what
the expected files hold.
"""

from __future__ import annotations

import ast
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from specgguf.migrate import files as mf
from specgguf.migrate.check import run_migrate
from specgguf.migrate.kinds import detect
from specgguf.migrate.reasons import REASONS
from specgguf.migrate.scan import Scan
from specgguf.migrate.text import check_text

CORPUS = Path(__file__).resolve().parent / "data" / "migrate"
EXPECTED = CORPUS / "expected"
FILES = sorted(p for p in CORPUS.iterdir() if p.is_file())

#: what `--check` still reports after `--write`, per file: (line, reason key), in file order.
#: Every other corpus file passes `--check` once written.
LEFT: dict[str, list[tuple[int, str]]] = {
    # program source: a list that does not start with its tool (options kept for a command
    # elsewhere, a table of names, sys.executable), a splat, an f-string, Go and TypeScript
    "benchmark_list.py": [(4, "source"), (4, "source")],
    "config_writer.go": [(9, "source"), (10, "source")],
    "exec_args.go": [(8, "source"), (9, "source")],
    "supervisor_services.ts": [(11, "source"), (12, "source"), (12, "source")],
    "vllm_launcher.py": [(7, "source"), (8, "source")],
    "r3_argv_tool.json": [(1, "source")],
    "r3_command_strings.py": [(8, "source"), (9, "source")],
    "r3_subprocess_calls.py": [(6, "source"), (6, "source"), (12, "source"), (14, "source")],
    "r3_nomad.hcl": [(6, "source")],  # its image names the tool, in another string
    # vLLM's --speculative-disable-by-batch-size, and the key in an existing JSON: no successor
    "deepseek_mtp_vllm.md": [(6, "no-equivalent")],
    "run_vllm_spec_config.sh": [(5, "no-equivalent")],
    # `-cd` in prose: the flag is gone, there is nothing to rename it to
    "flags_prose.md": [(5, "no-equivalent")],
    # --speculative-model among llama.cpp options: a fork's own flag
    "gemma_fork_launcher.sh": [(8, "fork")],
}
_REASON_OF = {text: key for key, text in REASONS.items()}


def run(paths, **kw) -> tuple[int, str]:
    out = io.StringIO()
    code = run_migrate([str(p) for p in paths], stdout=out, stderr=io.StringIO(), **kw)
    return code, out.getvalue()


def _parses(path: Path) -> None:
    """The written file still parses as what it is (where the parser is here)."""
    kind = detect(str(path), path.read_text(errors="surrogateescape"))[0]
    if path.suffix == ".sh" and shutil.which("bash"):
        subprocess.run(["bash", "-n", str(path)], check=True, capture_output=True)
    elif path.suffix == ".json":
        json.loads(path.read_text())
    elif path.suffix == ".py":
        ast.parse(path.read_text())
    elif kind == "yaml":
        yaml = pytest.importorskip("yaml")
        yaml.safe_load(path.read_text())
    elif kind == "dockerfile":
        _dockerfile_parses(path.read_text())
    elif kind == "make" and shutil.which("make"):
        subprocess.run(["make", "-n", "-f", str(path)], check=True, capture_output=True,
                       cwd=path.parent)


#: a Dockerfile's instructions (a line that continues none must start with one)
_INSTRUCTIONS = {"ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK",
                 "LABEL", "MAINTAINER", "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME",
                 "WORKDIR"}


def _dockerfile_parses(text: str) -> None:
    """Every line is a comment, blank, the continuation of the line above (`\\`) or an
    instruction: a line added after a continued instruction's last line must continue it."""
    continued = False
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not continued and stripped and not stripped.startswith("#"):
            assert stripped.split()[0].upper() in _INSTRUCTIONS, f"line {n}: {line!r}"
        if stripped and not (continued and stripped.startswith("#")):
            continued = stripped.endswith("\\")


def _left(report: str) -> list[tuple[int, str]]:
    """(line, reason key) of each `cannot migrate safely` line of a report."""
    out = []
    for line in report.splitlines():
        if ": cannot migrate safely: " not in line:
            continue
        m = re.match(r".*?:(\d+): cannot migrate safely: .* \[([^\]]+)\]$", line)
        assert m and m.group(2) in _REASON_OF, line  # every line names a known reason
        out.append((int(m.group(1)), _REASON_OF[m.group(2)]))
    return out


def test_the_corpus_covers_the_file_kinds_and_every_file_has_its_expected_text():
    assert len(FILES) >= 30
    kinds = {detect(str(p), p.read_text(errors="surrogateescape"))[0] for p in FILES}
    assert {"shell", "make", "bat", "yaml", "markdown", "dockerfile"} <= kinds
    names = {p.name for p in FILES}
    for p in EXPECTED.iterdir():  # a rewritten text for a corpus file, never a copy of it
        assert p.name in names and p.read_bytes() != (CORPUS / p.name).read_bytes(), p
    assert set(LEFT) <= names


def _expected(src: Path) -> bytes:
    path = EXPECTED / src.name
    return (path if path.exists() else src).read_bytes()


@pytest.mark.parametrize("src", FILES, ids=lambda p: p.name)
def test_write_gives_the_expected_text_and_check_names_what_is_left(src, tmp_path):
    path = tmp_path / src.name
    path.write_bytes(src.read_bytes())
    code, out = run([path], check=True)
    assert code == 1 and f"{path}:" in out  # every corpus file holds a removed flag
    assert path.read_bytes() == src.read_bytes()  # --check changes nothing

    source = mf.read(str(path))
    kind, comments = detect(str(path), source.text)
    planned, findings = check_text(source.text, kind, comments, str(tmp_path))
    run([path], write=True)
    assert path.read_bytes() == _expected(src)
    # bytes outside the edited tokens are unchanged: the file is the old text with exactly the
    # planned edits, and each edit lies on the lines of the command (or variable) it belongs to
    assert path.read_bytes() == source.encode(planned)
    scan = Scan(source.text)
    for f in findings:
        first, last = scan.line_of(f.span[0]), scan.line_of(f.span[1])
        for e in f.edits:
            end = e.end - 1 if e.end > e.start and source.text[e.end - 1] == "\n" else e.end
            assert first <= scan.line_of(e.start) and scan.line_of(end) <= last, (f, e)
    _parses(path)

    code, report = run([path], check=True)
    assert _left(report) == LEFT.get(src.name, [])
    assert code == (1 if src.name in LEFT else 0), report
    run([path], write=True)  # a second --write changes nothing more
    assert path.read_bytes() == _expected(src)


def test_how_many_corpus_files_pass_check_after_write(tmp_path):
    """The issue's measure: of the files holding a removed flag, how many `--check` passes once
    `--write` ran; the rest each name their reasons (the test above)."""
    for src in FILES:
        (tmp_path / src.name).write_bytes(src.read_bytes())
    run([tmp_path], write=True)
    passing = [p.name for p in sorted(tmp_path.iterdir()) if run([p], check=True)[0] == 0]
    assert len(passing) == len(FILES) - len(LEFT)
    # 103 of 116 today: what is left is program source (9 files), flags with no successor (3)
    # and a fork's flag (1)
    assert len(passing) >= len(FILES) - 13
