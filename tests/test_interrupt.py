"""Signals and closed pipes, on a real `python -m specgguf_cli.app run` process.

Ctrl-C during generation keeps what was already streamed, prints the statistics and exits
130 (with --json: still one valid JSON object, stop reason "interrupted"); SIGTERM and SIGHUP
do the same (the -lcd cache and the machine profile are saved) and exit 143 / 129; a signal
while the model loads (inside llama.cpp's log callback) or while the prompt is evaluated ends
the run as promptly, with the same report; a reader that goes away
(`specgguf run ... | head -c 20`) ends the run quietly, with no traceback.

The tiny models with --ignore-eos and -c 32768 generate for minutes, so a signal sent once
output has started always lands mid-generation.
"""

from __future__ import annotations

import json
import os
import selectors
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from specgguf_cli.app import run_cli

from tests.signal_defaults import restore_defaults

ROOT = Path(__file__).resolve().parent.parent
LONG = ["-t", "1", "-c", "32768", "-fa", "off", "--ignore-eos", "-n", "100000", "--temp", "0"]
PROMPT = ["-p", "hello"]
WAIT_S = 60  # for output to start, and for the process to end after the signal


def long_argv(target, draft, *extra) -> list[str]:
    return ["run", "-m", str(target), "-md", str(draft), *LONG, *PROMPT, *map(str, extra)]


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}



def start(argv: list[str], *, hooks: dict[str, str] | None = None) -> subprocess.Popen:
    """A new session, so the signal goes to its process group as a terminal's Ctrl-C does.
    `hooks` (tests.launch's variables) run the CLI through that launcher."""
    module = "tests.launch" if hooks else "specgguf_cli.app"
    return subprocess.Popen(
        [sys.executable, "-m", module, *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**env(), **(hooks or {})},
        start_new_session=True,
        preexec_fn=restore_defaults,
    )


def read_until(proc: subprocess.Popen, n_bytes: int, *, marker: bytes | None = None,
               stream: str = "stdout") -> bytes:  # fmt: skip
    """Read `stream` until at least n_bytes arrived, or `marker` (fail if the process ends or
    stalls first)."""
    fd = getattr(proc, stream).fileno()
    got = b""
    deadline = time.monotonic() + WAIT_S
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while (marker not in got) if marker is not None else (len(got) < n_bytes):
            left = deadline - time.monotonic()
            assert left > 0, f"no output after {WAIT_S} s: {got!r}"
            if sel.select(timeout=left):
                chunk = os.read(fd, 4096)
                assert chunk, f"{stream} closed early: {got!r}, rc {proc.wait()}"
                got += chunk
    return got


def interrupt(
    proc: subprocess.Popen, sig: int = signal.SIGINT, *, group: bool = True
) -> tuple[int, bytes, str]:
    """Send `sig` (to the process group as a terminal does, else to the process alone as
    `kill`, `timeout` and `docker stop` do) and collect the outcome."""
    if group:
        os.killpg(proc.pid, sig)
    else:
        os.kill(proc.pid, sig)
    return finish(proc)


def finish(proc: subprocess.Popen) -> tuple[int, bytes, str]:
    try:
        out, err = proc.communicate(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(
            f"the run did not end after the signal; stdout {out[-200:]!r}, "
            f"stderr {err[-2000:]!r}"
        ) from None
    return proc.returncode, out, err.decode("utf-8", "replace")


def wait_for_rounds(proc: subprocess.Popen, trace: Path) -> None:
    """--json writes nothing until the end: --trace (flushed every round) tells when
    generation is under way."""
    deadline = time.monotonic() + WAIT_S
    while not (trace.exists() and trace.stat().st_size > 0):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "generation never started"
        time.sleep(0.02)
    time.sleep(0.2)  # a few rounds more


def assert_no_traceback(err: str) -> None:
    assert "Traceback" not in err, err
    assert "Exception ignored" not in err, err
    assert "Error" not in err, err


@pytest.fixture(scope="module")
def greedy_reference(tiny_target, tiny_draft):
    """The first tokens the same command writes when left alone (greedy: deterministic)."""
    import io
    from contextlib import redirect_stdout

    argv = ["run", "-m", str(tiny_target), "-md", str(tiny_draft), *LONG, *PROMPT]
    argv[argv.index("100000")] = "48"
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert run_cli([*argv, "-q"]) == 0
    text = buf.getvalue().rstrip("\n")
    assert len(text) >= 40
    return text


def assert_same_start(text: str, reference: str) -> None:
    n = min(len(text), len(reference))
    assert n > 0 and text[:n] == reference[:n], (text[:80], reference[:80])


# -- Ctrl-C -----------------------------------------------------------------------------------


def test_sigint_keeps_the_streamed_text_prints_stats_exits_130(
    tiny_target, tiny_draft, greedy_reference
):
    proc = start(long_argv(tiny_target, tiny_draft))
    before = read_until(proc, 16)
    code, rest, err = interrupt(proc)
    out = (before + rest).decode("utf-8")
    assert code == 130, err
    assert len(out) >= 16
    assert out.endswith("\n")  # the text is ended before the report
    assert_same_start(out.rstrip("\n"), greedy_reference)
    # the statistics follow, on stderr
    assert "decoded" in err and "n_predict" in err and "n_drafted" in err
    n_predict = int(err.split("n_predict =")[1].split()[0])
    assert n_predict > 0
    assert_no_traceback(err)


def test_sigint_with_json_emits_valid_json(tiny_target, tiny_draft, tmp_path, greedy_reference):
    """--json writes nothing until the end, so --trace (flushed every round) tells when
    generation is under way."""
    trace = tmp_path / "trace.jsonl"
    proc = start(long_argv(tiny_target, tiny_draft, "--json", "--trace", trace))
    wait_for_rounds(proc, trace)
    code, out, err = interrupt(proc)
    assert code == 130, err
    lines = out.decode("utf-8").splitlines()
    assert len(lines) == 1, lines
    obj = json.loads(lines[0])
    assert obj["stop_reason"] == "interrupted"
    assert obj["tokens_predicted"] > 0 and obj["text"]
    assert_same_start(obj["text"], greedy_reference)
    assert "decoded" in err and "n_predict" in err
    assert_no_traceback(err)


def test_second_ctrl_c_while_cleaning_up_is_quiet(tiny_target, tiny_draft, greedy_reference):
    proc = start(long_argv(tiny_target, tiny_draft))
    before = read_until(proc, 16)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.01)
    code, rest, err = interrupt(proc)  # the second one, while the first is being handled
    # 130, or killed by SIGINT itself (-2) when the tiny run had already finished its cleanup
    # and the interpreter was shutting down (Python restores the default handlers then): a
    # shell reports both as 130, and the report below must be complete either way
    assert code in (130, -signal.SIGINT), err
    assert_same_start((before + rest).decode("utf-8").rstrip("\n"), greedy_reference)
    assert "decoded" in err and "n_predict" in err
    assert_no_traceback(err)


# -- SIGTERM, SIGHUP: as Ctrl-C, with their own exit status -----------------------------------


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_clean_up_like_ctrl_c(
    sig, status, tiny_target, tiny_draft, tmp_path, greedy_reference
):
    """`timeout`, `docker stop` and systemd send SIGTERM to the process (not its group); a
    closed terminal sends SIGHUP. Both keep the text, print the statistics and the --json
    object, save the -lcd cache and the machine profile (auto is the default), and exit with
    128 + the signal number."""
    cache = tmp_path / "dynamic.bin"
    trace = tmp_path / "trace.jsonl"
    profiles = Path(os.environ["SPECGGUF_PROFILES"])
    argv = long_argv(
        tiny_target, tiny_draft, "--spec-type", "ngram-cache,draft-simple", "-lcd", cache,
        "--json", "--trace", trace,
    )  # fmt: skip
    proc = start(argv)
    wait_for_rounds(proc, trace)
    assert not cache.exists() and not list(profiles.glob("*.json"))  # written at the end only
    code, out, err = interrupt(proc, sig, group=False)
    assert code == status, err
    (line,) = out.decode("utf-8").splitlines()
    obj = json.loads(line)
    assert obj["stop_reason"] == "interrupted" and obj["tokens_predicted"] > 0
    assert_same_start(obj["text"], greedy_reference)
    assert "decoded" in err and "n_predict" in err
    assert cache.stat().st_size > 0  # the n-grams of this run were saved
    assert list(profiles.glob("*.json"))  # and what auto measured
    assert_no_traceback(err)


# -- at load, at prompt evaluation ------------------------------------------------------------


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_while_loading_inside_llama_cpp_callback(sig, status, tiny_target, tiny_draft):
    """The signal lands while llama.cpp, loading the model, is inside specgguf's log callback
    (slowed down by tests.launch so the moment can be aimed at). Python's own handler raised
    into ctypes there: "Exception ignored on calling ctypes callback", and the run went on to
    exit 0. Now: held until the callback returns, the load is abandoned, and the run reports
    an empty, interrupted generation."""
    hooks = {"SPECGGUF_TEST_SLOW_LOG": "0.05"}
    argv = ["run", "-m", tiny_target, "-md", tiny_draft, "-p", "hello", "-n", "16", "--json"]
    proc = start(list(map(str, argv)), hooks=hooks)
    from tests.launch import LOAD_MARKER

    seen = read_until(proc, 0, marker=LOAD_MARKER, stream="stderr")
    t0 = time.monotonic()
    code, out, err = interrupt(proc, sig, group=sig == signal.SIGINT)
    err = seen.decode() + err
    assert code == status, err
    (line,) = out.decode("utf-8").splitlines()
    obj = json.loads(line)
    assert obj["stop_reason"] == "interrupted"
    assert obj["text"] == "" and obj["tokens_predicted"] == 0
    assert "decoded    0 tokens" in err
    assert_no_traceback(err)
    assert time.monotonic() - t0 < WAIT_S / 2  # it did not load and generate first

    # control: the same command left alone loads and generates
    proc = start(list(map(str, argv)), hooks=hooks)
    code, out, err = finish(proc)
    assert code == 0, err
    assert json.loads(out)["tokens_predicted"] > 0


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_signal_during_prompt_evaluation(sig, status, tiny_target, tiny_draft, tmp_path):
    """A 16k-token prompt in ONE llama_decode call (-b 16384) takes the tiny target tens of
    seconds on one thread (36 s measured here); without llama.cpp's abort check the signal
    would wait for all of it. The bound below is generous for an abort, not for a wait."""
    from tests.launch import PREFILL_MARKER

    prompt = tmp_path / "long.txt"
    prompt.write_text("the cat sat on the mat. " * 1400)
    argv = ["run", "-m", tiny_target, "-md", tiny_draft, "-f", prompt, "-t", "1", "-c", "32768",
            "-b", "16384", "-fa", "off", "--temp", "0", "-n", "8", "--json"]  # fmt: skip
    proc = start(list(map(str, argv)), hooks={"SPECGGUF_TEST_MARK_PREFILL": "1"})
    seen = read_until(proc, 0, marker=PREFILL_MARKER, stream="stderr")
    time.sleep(0.5)
    t0 = time.monotonic()
    code, out, err = interrupt(proc, sig, group=sig == signal.SIGINT)
    assert time.monotonic() - t0 < 15, "the prompt evaluation was not abandoned"
    err = seen.decode() + err
    assert code == status, err
    obj = json.loads(out)
    assert obj["stop_reason"] == "interrupted" and obj["text"] == ""
    assert obj["tokens_predicted"] == 0
    assert "encoded    0 tokens" in err and "decoded    0 tokens" in err
    assert_no_traceback(err)


def test_signal_while_a_chat_template_renders(tiny_target, tiny_draft, tmp_path):
    """A template that loops for a long time (1.9 million steps, just inside the rendering
    bounds) is stopped by Ctrl-C like everything else: the report and the --json object,
    exit 130."""
    from tests.launch import RENDER_MARKER

    slow = tmp_path / "slow.jinja"
    slow.write_text(
        "{% for i in range(10000) %}{% for j in range(190) %}{% endfor %}{% endfor %}"
        "{{ messages[0]['content'] }}"
    )
    argv = ["run", "-m", tiny_target, "-md", tiny_draft, *LONG[:6], "-p", "hi", "--chat",
            "--chat-template-file", slow, "--json"]  # fmt: skip
    proc = start(list(map(str, argv)), hooks={"SPECGGUF_TEST_MARK_RENDER": "1"})
    seen = read_until(proc, 0, marker=RENDER_MARKER, stream="stderr")
    # soon after the render starts: on a fast CPU the whole render takes well under a second
    time.sleep(0.05)
    code, out, err = interrupt(proc)
    err = seen.decode() + err
    assert code == 130, err
    obj = json.loads(out)
    assert obj["stop_reason"] == "interrupted" and obj["text"] == ""
    assert "decoded    0 tokens" in err
    assert_no_traceback(err)


def test_conversation_ctrl_c_stops_the_answer_sigterm_ends_it(tiny_target, tiny_draft):
    """-cnv: Ctrl-C stops the answer being written and the conversation goes on; SIGTERM
    during the next answer ends it (exit 143), both answers' reports printed."""
    argv = ["run", "-m", tiny_target, "-md", tiny_draft, *LONG, "-cnv", "-p", "hello"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "specgguf_cli.app", *map(str, argv)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env(),
        start_new_session=True,
        preexec_fn=restore_defaults,
    )
    first = read_until(proc, 16)
    os.killpg(proc.pid, signal.SIGINT)
    # the first answer ends (its report line on stderr), then the second turn is read
    read_until(proc, 0, marker=b"interrupted]", stream="stderr")
    proc.stdin.write(b"and then?\n")
    proc.stdin.flush()
    more = read_until(proc, 16)
    code, rest, err = interrupt(proc, signal.SIGTERM, group=False)
    assert code == 143, err
    assert first and more.strip()
    assert "interrupted]" in err  # the second answer's report
    assert_no_traceback(err)


# -- closed pipe ------------------------------------------------------------------------------


def test_closed_pipe_ends_quietly(tiny_target, tiny_draft):
    proc = start(long_argv(tiny_target, tiny_draft))
    first = read_until(proc, 20)
    proc.stdout.close()  # the reader goes away, as `| head -c 20` does
    try:
        err = proc.stderr.read().decode("utf-8", "replace")
        proc.wait(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert first
    assert proc.returncode != 0  # a run cut short is not a success
    assert_no_traceback(err)
    assert "Broken pipe" not in err and "BrokenPipe" not in err


def test_closed_pipe_exit_status_is_141(tiny_target, tiny_draft):
    proc = start(long_argv(tiny_target, tiny_draft))
    read_until(proc, 20)
    proc.stdout.close()
    try:
        proc.stderr.read()
        proc.wait(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 141


def test_pipe_into_head_in_a_shell(tiny_target, tiny_draft):
    """`specgguf run ... | head -c 20` exactly as a user types it (pipefail off)."""
    cmd = " ".join(
        shlex.quote(a)
        for a in [sys.executable, "-m", "specgguf_cli.app", *long_argv(tiny_target, tiny_draft)]
    )
    t0 = time.monotonic()
    res = subprocess.run(
        ["bash", "-c", f"set +o pipefail; {cmd} | head -c 20"],
        capture_output=True,
        cwd=ROOT,
        env=env(),
        timeout=WAIT_S * 2,
    )
    assert res.returncode == 0  # head's status
    assert len(res.stdout) == 20
    err = res.stderr.decode("utf-8", "replace")
    assert_no_traceback(err)
    assert "Broken pipe" not in err and "BrokenPipe" not in err
    assert time.monotonic() - t0 < WAIT_S  # it ended at once, not after minutes of generation
