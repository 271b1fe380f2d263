"""-lcd files shared by processes: concurrent writers keep the union of their n-grams, a symlink
stays a symlink, an unwritable path is refused before any model loads, a writer killed mid-save
leaves nothing behind for long, and oversized or non-regular files are refused without reading
them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from specgguf_cli.app import run_cli

from specgguf.drafters.ngram_cache import (
    MAX_CACHE_MB_ENV,
    NgramCache,
    NgramCounts,
    check_cache_paths,
    load_ngram_cache,
    merge_into_cache_file,
    ngram_key,
    save_ngram_cache,
)
from specgguf.errors import ExitCode, SpecggufError

ROOT = Path(__file__).resolve().parents[1]
SPECGGUF = str(Path(sys.executable).with_name("specgguf"))

# A writer process: load the cache, say so, wait for "go", then save this run's sequence.
WRITER = textwrap.dedent(
    """
    import os, sys, time
    from specgguf.drafters.ngram_cache import NgramCache
    path, ready, go, first = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    d = NgramCache(dynamic_path=path)
    d.begin([first, first + 1, first + 2, first + 3, first + 4])
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.005)
    d.close()
    """
)


def _counts(parts: dict) -> NgramCounts:
    c = NgramCounts()
    for key, part in parts.items():
        for tok, n in part.items():
            c.add(ngram_key(list(key)), tok, n)
    return c


def _wait_for(paths, timeout=60.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(p) for p in paths):
        assert time.monotonic() < deadline, f"timed out waiting for {paths}"
        time.sleep(0.01)


def test_two_concurrent_writers_keep_the_union(tmp_path):
    """Both processes load the same file before either saves; each then adds its own
    sequence. Saving by overwriting (as before) kept only the last writer's n-grams."""
    dyn = tmp_path / "dyn.bin"
    save_ngram_cache(_counts({(1, 2): {3: 1}}), dyn)  # something both loaded
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs, ready = [], []
    for i, first in enumerate((100, 200)):
        r = tmp_path / f"ready{i}"
        ready.append(r)
        procs.append(subprocess.Popen(
            [sys.executable, "-c", WRITER, str(dyn), str(r), str(go), str(first)], env=env
        ))  # fmt: skip
    _wait_for(ready)
    go.touch()
    for p in procs:
        assert p.wait(timeout=60) == 0
    parts = load_ngram_cache(dyn).parts
    assert parts[ngram_key([1, 2])] == {3: 1}  # what was there, counted once
    for first in (100, 200):  # each writer's own n-grams
        assert parts[ngram_key([first, first + 1])] == {first + 2: 1}
        assert parts[ngram_key([first + 3])] == {first + 4: 1}
    assert not list(tmp_path.glob(".dyn.bin.*.tmp"))


def test_concurrent_cli_runs_keep_both_prompts_ngrams(tiny_target, tmp_path):
    """Two `specgguf run --spec-type ngram-cache -lcd` at once, different prompts: the file
    afterwards holds the n-grams of both."""
    dyn = tmp_path / "shared.bin"
    base = [SPECGGUF, "run", "-m", str(tiny_target), "-t", "1", "-c", "256", "-fa", "off",
            "--spec-type", "ngram-cache", "-lcd", str(dyn), "-n", "8", "--temp", "0",
            "-q"]  # fmt: skip
    prompts = ["alpha beta gamma delta", "zulu yankee xray whiskey"]
    procs = [
        subprocess.Popen([*base, "-p", p], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for p in prompts
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    keys = {k for k in load_ngram_cache(dyn).parts}
    # the byte tokens of "a", "l" (ids of their bytes in the tiny vocabulary) and of "z", "u"
    from tests.tiny_models import byte_to_unicode, vocab_tokens

    tokens, _, _ = vocab_tokens()
    tid = {t: i for i, t in enumerate(tokens)}
    b2u = byte_to_unicode()
    for a, b in (("l", "p"), ("z", "u")):  # "alpha", "zulu"
        key = ngram_key([tid[b2u[ord(a)]], tid[b2u[ord(b)]]])
        assert key in keys, (a, b)


def test_symlink_is_kept_and_its_target_updated(tmp_path):
    real = tmp_path / "store" / "cache.bin"
    real.parent.mkdir()
    save_ngram_cache(_counts({(1,): {2: 1}}), real)
    link = tmp_path / "link.bin"
    link.symlink_to(real)
    d = NgramCache(dynamic_path=link)
    d.begin([5, 6, 7])
    d.close()
    assert link.is_symlink() and os.readlink(link) == str(real)
    parts = load_ngram_cache(real).parts
    assert parts[ngram_key([1])] == {2: 1} and parts[ngram_key([5, 6])] == {7: 1}
    # a dangling link: the file is created where the link points
    dangling = tmp_path / "dangling.bin"
    dangling.symlink_to(tmp_path / "store" / "new.bin")
    merge_into_cache_file(_counts({(3,): {4: 1}}), dangling)
    assert dangling.is_symlink() and (tmp_path / "store" / "new.bin").is_file()


@pytest.mark.parametrize(
    "make, what",
    [
        (lambda t: t / "missing-dir" / "c.bin", "no such directory"),
        (lambda t: (t / "afile").write_text("x") and t / "afile" / "c.bin", "not a directory"),
        (lambda t: (t / "adir").mkdir() or t / "adir", "is a directory"),
    ],
)
def test_unwritable_lcd_fails_before_loading(tmp_path, capsys, make, what):
    """The model does not even exist: the -lcd check comes first, so nothing is loaded."""
    path = make(tmp_path)
    t0 = time.monotonic()
    code = run_cli(["run", "-m", str(tmp_path / "no-model.gguf"), "--spec-type", "ngram-cache",
                    "-lcd", str(path), "-p", "hello"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "-lcd" in lines[0] and what in lines[0], err
    assert time.monotonic() - t0 < 10
    # negative control: a writable path gets past the check, to the missing model (exit 3)
    code = run_cli(["run", "-m", str(tmp_path / "no-model.gguf"), "--spec-type", "ngram-cache",
                    "-lcd", str(tmp_path / "ok.bin"), "-p", "hello"])  # fmt: skip
    assert code == ExitCode.MODEL, capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_directory_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(SpecggufError, match="cannot create files"):
            check_cache_paths(None, ro / "c.bin")
    finally:
        ro.chmod(0o755)


def test_writer_killed_mid_save_leaves_no_tmp_after_next_save(tmp_path):
    """SIGKILL while the temp file is being written (fsync held back): the temp file stays,
    the cache file is untouched, and the next save removes the leftover."""
    dyn = tmp_path / "dyn.bin"
    save_ngram_cache(_counts({(1, 2): {3: 1}}), dyn)
    before = dyn.read_bytes()
    code = textwrap.dedent(
        """
        import os, sys, time
        from specgguf.drafters.ngram_cache import NgramCache
        os.fsync = lambda fd: time.sleep(600)  # stuck in the middle of the save
        d = NgramCache(dynamic_path=sys.argv[1])
        d.begin([7, 8, 9, 10])
        d.close()
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(dyn)],
                            env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    try:
        tmp = tmp_path / f".dyn.bin.{proc.pid}.tmp"
        _wait_for([tmp])
        time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert tmp.exists() and dyn.read_bytes() == before  # the old file survived the kill
    d = NgramCache(dynamic_path=dyn)
    d.begin([1, 2, 3])
    d.close()
    assert not list(tmp_path.glob("*.tmp"))
    assert load_ngram_cache(dyn).parts[ngram_key([1, 2])] == {3: 2}


def test_oversized_cache_is_refused_before_parsing(tmp_path, monkeypatch, capsys):
    big = tmp_path / "big.bin"
    save_ngram_cache(_counts({(i,): {i + 1: 1} for i in range(200)}), big)  # 5.6 KB
    monkeypatch.setenv(MAX_CACHE_MB_ENV, "0.001")  # ~1 KB
    for call in (lambda: load_ngram_cache(big), lambda: check_cache_paths(big, None),
                 lambda: check_cache_paths(None, big)):  # fmt: skip
        with pytest.raises(SpecggufError, match=MAX_CACHE_MB_ENV) as err:
            call()
        assert err.value.code == ExitCode.USAGE and "\n" not in str(err.value)
    code = run_cli(["run", "-m", str(tmp_path / "none.gguf"), "--spec-type", "ngram-cache",
                    "-lcs", str(big), "-p", "x"])  # fmt: skip
    assert code == ExitCode.USAGE and MAX_CACHE_MB_ENV in capsys.readouterr().err
    monkeypatch.setenv(MAX_CACHE_MB_ENV, "1")  # negative control: under the cap, loads
    assert len(load_ngram_cache(big)) == 200


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo.bin"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(SpecggufError, match="not a regular file"):
        load_ngram_cache(fifo)
    with pytest.raises(SpecggufError, match="not a regular file"):
        check_cache_paths(fifo, None)
    assert time.monotonic() - t0 < 5
