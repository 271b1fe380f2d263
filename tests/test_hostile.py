"""Hostile use of `run` and `serve`, at the level a user meets it: a real `specgguf run`
process (its exit status and its one stderr line), a real `specgguf serve` process on
127.0.0.1 spoken to over raw sockets and HTTP (status, OpenAI error object, and a stderr
without a traceback when it stops).

The cases: a -c larger than memory (exit 7 before anything is allocated, in run, serve and
bench), lone surrogates and deep nesting in request bodies and --jsonl lines, request fields
whose feature is missing, a client that vanishes mid-body, a body that never ends while the
server is told to stop, out-of-range seeds and non-finite temperatures, a server open to the
network without a key, the model path in the public model list, and a -lcd that cannot be
written. Then a second audit's: integers larger than any float, JSON schemas and grammars
whose building would exhaust memory, the C stack or minutes of setup, a temperature that
overflows the logits, and endless input (/dev/zero) as a prompt, grammar, schema or --jsonl
file and on stdin.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from specgguf.errors import MAX_TEXT_BYTES, ExitCode, SpecggufError
from specgguf.io import json_input
from specgguf.loading import memory_budget as mb
from specgguf.modelfiles.gguf_info import read_gguf_info
from tests.gguf_factory import write_gguf
from tests.serve_helpers import FAST, Server, env

ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30


def specgguf(*argv, extra_env: dict[str, str] | None = None, stdin: str | None = None):
    """A real `specgguf` process: (exit status, stdout, stderr)."""
    res = subprocess.run(
        [sys.executable, "-m", "specgguf_cli.app", *map(str, argv)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**env(), **(extra_env or {})},
        timeout=300,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )
    return res.returncode, res.stdout, res.stderr


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1, err
    return lines[0]


# -- 1. -c bounded by memory: the arithmetic ---------------------------------------------------


@pytest.fixture
def small_info(tmp_path):
    return read_gguf_info(
        write_gguf(
            tmp_path / "m.gguf", block_count=3, embedding_length=16, head_count=4, head_count_kv=2
        )
    )


def test_kv_cache_bytes_follow_the_cache_type(small_info):
    # 3 layers x 2 KV heads x head size 4 = 24 K and 24 V elements per token
    assert mb.kv_type_bytes("f16", 1000) == 2000
    assert mb.kv_type_bytes("f32", 1000) == 4000
    assert mb.kv_type_bytes("q8_0", 64) == 2 * 34  # blocks of 32 elements, 34 bytes each
    assert mb.kv_type_bytes("q4_0", 33) == 2 * 18  # a partial block costs a whole one
    plan = mb.ContextPlan("target", small_info, 512, 1, "f16", "q8_0")
    got = mb.context_bytes(plan, n_ubatch=8, flash_attn="on")
    kv = 512 * 24 * 2 + mb.kv_type_bytes("q8_0", 512 * 24)
    assert got == kv + mb.GRAPH_MARGIN
    assert mb.logits_bytes(plan, 8) == 8 * small_info.vocab.n_vocab * 4
    # without flash attention, a micro-batch's attention scores over the whole cache too
    off = mb.context_bytes(plan, n_ubatch=8, flash_attn="off")
    assert off == got + 8 * 512 * 4 * 4
    # cells are rounded up as llama.cpp rounds them
    odd = mb.ContextPlan("target", small_info, 300, 1, "f16", "q8_0")
    assert mb.context_bytes(odd, n_ubatch=8, flash_attn="on") == got


def test_every_slot_and_the_draft_count(small_info):
    one = mb.ContextPlan("target", small_info, 1024, 1, "f16", "f16")
    four = mb.ContextPlan("target", small_info, 1024, 4, "f16", "f16")
    draft = mb.ContextPlan("draft", small_info, 1024, 4, "f16", "f16")
    kw = {"n_ubatch": 512, "flash_attn": "auto"}
    ctx = mb.context_bytes(one, **kw)
    logits = mb.logits_bytes(one, 512)  # once per model: slots decode one at a time
    assert mb.total_bytes([one], **kw) == ctx + logits
    assert mb.total_bytes([four], **kw) == 4 * ctx + logits
    assert mb.total_bytes([four, draft], **kw) == 8 * ctx + 2 * logits


def test_an_mtp_head_counts_its_own_nextn_layers(tmp_path, monkeypatch):
    """draft-mtp's context over the target's NextN layers holds those layers' KV: the plan
    of its context counts them (one layer of the three here, with its own KV head count),
    and a session that uses it needs that much more memory."""
    from types import SimpleNamespace

    info = read_gguf_info(
        write_gguf(
            tmp_path / "mtp.gguf",
            block_count=3,
            embedding_length=16,
            head_count=4,
            head_count_kv=[2, 2, 3],
            extra={"llama.nextn_predict_layers": 1},
        )
    )
    head = mb.nextn_blocks(info)
    assert head is not None and head.block_count == 1
    assert head.head_count_kv_per_layer == (3,)
    plan = mb.ContextPlan("MTP head", head, 1024, 1, "f16", "f16")
    kw = {"n_ubatch": 512, "flash_attn": "on"}
    assert mb.context_bytes(plan, **kw) == 1024 * 3 * 4 * 2 * 2 + mb.GRAPH_MARGIN
    assert mb.nextn_blocks(read_gguf_info(write_gguf(tmp_path / "p.gguf"))) is None
    # the session's check: a budget that holds the target alone refuses it with the head
    load = SimpleNamespace(
        cache_type_k="f16", cache_type_v="f16", cache_type_k_draft="f16",
        cache_type_v_draft="f16", n_ubatch=512, n_batch=2048, flash_attn="on",
    )  # fmt: skip
    pre = SimpleNamespace(target=info, draft=None, mtp_drafter=None)
    target = [mb.ContextPlan("target", info, 4096, 2, "f16", "f16")]
    alone = mb.total_bytes(target, **kw)
    monkeypatch.setenv(mb.AVAILABLE_ENV, str(alone))
    mb.check_session(pre, 8192, 2, load, offload=False)
    with pytest.raises(SpecggufError, match="MTP head x2 slots"):
        mb.check_session(pre, 8192, 2, load, offload=False, mtp_head=True)


def test_refusal_names_a_context_that_fits(small_info):
    n_ctx = 10_000_000
    plans = [mb.ContextPlan("target", small_info, n_ctx, 1, "f16", "f16")]
    kw = {"n_ubatch": 512, "flash_attn": "auto"}
    available = 200 << 20
    with pytest.raises(Exception) as e:
        mb.require_fits(plans, n_ctx, available=available, **kw)
    assert e.value.code == ExitCode.RUNTIME
    msg = str(e.value)
    assert msg.startswith(f"-c {n_ctx} needs about ") and "\n" not in msg
    fit = mb.tokens_that_fit(plans, n_ctx, available, **kw)
    assert f"try -c {fit} or less" in msg
    assert fit % mb.CTX_PAD == 0
    as_big = [mb.ContextPlan("target", small_info, fit, 1, "f16", "f16")]
    bigger = [mb.ContextPlan("target", small_info, fit + mb.CTX_PAD, 1, "f16", "f16")]
    assert mb.total_bytes(as_big, **kw) <= available < mb.total_bytes(bigger, **kw)
    # what fits passes; GPU memory counts when layers are offloaded
    mb.require_fits(as_big, fit, available=available, **kw)
    mb.require_fits(plans, n_ctx, available=available, device_free=1 << 40, **kw)


def test_available_memory_from_meminfo_or_the_override(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  32000000 kB\nMemFree:  1000 kB\nMemAvailable:  2048 kB\n")
    assert mb.available_bytes({}, str(meminfo)) == 2048 * 1024
    assert mb.available_bytes({mb.AVAILABLE_ENV: "12345"}, str(meminfo)) == 12345
    assert mb.available_bytes({}, str(tmp_path / "none")) is None  # no /proc: no check


# -- 1. -c bounded by memory: run, serve, bench ----------------------------------------------

LOW_MEMORY = {mb.AVAILABLE_ENV: str(GIB)}


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--spec-type", "none", "-p", "hi", "-n", "4"],
        ["serve", "--port", "0", "-np", "4"],
        ["bench", "-p", "hi", "-n", "4", "--no-warmup"],
    ],
    ids=["run", "serve", "bench"],
)
def test_a_context_larger_than_memory_is_refused_in_one_line(tiny_target, command):
    code, out, err = specgguf(
        *command, "-m", tiny_target, "-t", "1", "-c", "2000000000", extra_env=LOW_MEMORY
    )
    line = one_line(err.replace(_loading_line(err), ""))
    assert code == ExitCode.RUNTIME, err
    assert line.startswith("error: -c 2000000000 needs about "), line
    assert "1.0 GiB available" in line and "try -c " in line
    if command[0] == "serve":
        assert "x4 slots" in line and "listening" not in err


def _loading_line(err: str) -> str:
    """serve says what it loads first; that line is not the error."""
    return next((ln for ln in err.splitlines() if ln.startswith("specgguf serve: loading")), "")


def test_a_context_that_fits_still_runs(tiny_target):
    code, out, err = specgguf(
        "run", "-m", tiny_target, "--spec-type", "none", "-p", "hi", "-n", "2", "-t", "1",
        "-c", "512", "--temp", "0", extra_env=LOW_MEMORY,
    )  # fmt: skip
    assert code == 0, err


# -- 7. seeds and temperatures, as the server checks them ------------------------------------


@pytest.mark.parametrize(
    ("flag", "value", "expect"),
    [
        ("--seed", "18446744073709551616", "-s/--seed: 18446744073709551616"),
        ("--seed", "-2", "-s/--seed: -2"),
        ("--seed", "4294967296", "must be an integer in -1..4294967295"),
        ("--temp", "inf", "--temp: inf (must be a number >= 0)"),
        ("--temp", "nan", "--temp: nan (must be a number >= 0)"),
    ],
)
def test_run_refuses_seeds_and_temperatures_the_server_refuses(tiny_target, flag, value, expect):
    code, out, err = specgguf("run", "-m", tiny_target, "-p", "hi", "-n", "2", flag, value)
    assert code == ExitCode.USAGE, err
    line = one_line(err)
    assert line.startswith("error: invalid value for ") and expect in line, line
    assert out == ""


def test_run_takes_the_largest_seed(tiny_target):
    code, out, err = specgguf(
        "run", "-m", tiny_target, "--spec-type", "none", "-p", "hi", "-n", "2", "-t", "1",
        "-c", "512", "--seed", "4294967295", "--json",
    )  # fmt: skip
    assert code == 0, err


# -- 11. a -lcd that cannot be written --------------------------------------------------------


def test_lcd_that_is_not_a_writable_file(tiny_target):
    code, out, err = specgguf(
        "run", "-m", tiny_target, "--spec-type", "ngram-cache", "-p", "hi", "-n", "2",
        "-lcd", "/proc/version",
    )  # fmt: skip
    assert code == ExitCode.USAGE, err
    line = one_line(err)
    assert line.startswith("error: -lcd /proc/version: not a writable regular file"), line
    assert "no such directory" not in line


# -- 2. --jsonl lines ---------------------------------------------------------------------------


def test_jsonl_line_with_a_lone_surrogate_is_a_prompt_error(tiny_target):
    lines = (
        '{"prompt": "\\ud800 hi", "id": "bad"}\n{"prompt": "x", "id": "\\udc00"}\n'
        '{"prompt": "fine", "id": "good"}\n'
    )
    code, out, err = specgguf(
        "run", "-m", tiny_target, "--spec-type", "none", "-n", "2", "-t", "1", "-c", "512",
        "--temp", "0", "--jsonl", stdin=lines,
    )  # fmt: skip
    assert code == ExitCode.BATCH_PARTIAL, err
    objs = [json.loads(ln) for ln in out.splitlines()]
    assert [o["id"] for o in objs] == ["bad", None, "good"]  # nothing lost
    error = objs[0]["error"]
    assert error["type"] == "prompt" and error["code"] == ExitCode.PROMPT
    assert "'prompt' holds a lone UTF-16 surrogate" in error["message"]
    assert "'id' holds a lone" in objs[1]["error"]["message"]
    assert "error" not in objs[2]
    assert "Traceback" not in err


# -- 2, 3. the JSON reader --------------------------------------------------------------------


def test_nesting_depth_ignores_brackets_in_strings():
    assert json_input.nesting_depth(b'{"a": [1, {"b": "[[[{{{\\"]]]"}]}') == 3
    assert json_input.nesting_depth(b"[" * 500 + b"]" * 500) == 500
    assert json_input.nesting_depth(b'"just a string"') == 0


def test_lone_surrogates_are_found_by_path():
    doc = json.loads('{"messages": [{"role": "user", "content": "ok"}, {"role": "\\udc80"}]}')
    assert json_input.lone_surrogate_path(doc) == "'messages[1].role'"
    assert json_input.lone_surrogate_path(json.loads('{"\\ud800": 1}')) == "a key"
    assert json_input.lone_surrogate_path(json.loads('{"a": ["é", "😀"]}')) is None
    # a proper pair is one character, not a lone surrogate
    assert json_input.lone_surrogate_path(json.loads('["\\ud83d\\ude00"]')) is None


# -- the server ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tiny_target):
    # open to the network without a key: the warning case (the tests speak to 127.0.0.1)
    s = Server(["-m", str(tiny_target), *FAST, "-c", "1024", "-np", "2", "--host", "0.0.0.0"])
    yield s
    code, err = s.stop()
    assert code == 0, err
    assert "Traceback" not in err and "ClientDisconnect" not in err, err


def test_open_host_without_a_key_warns_once(server):
    warnings = [ln for ln in server.err.decode().splitlines() if ln.startswith("warning: --host")]
    assert len(warnings) == 1, server.err
    assert "0.0.0.0 without --api-key" in warnings[0]


def test_public_model_list_shows_no_path(server, tiny_target):
    for path in ("/v1/models", "/models"):
        status, _, obj = server.request("GET", path)
        assert status == 200
        assert [m["id"] for m in obj["data"]] == [tiny_target.name]
        assert str(tiny_target.parent) not in json.dumps(obj)


SURROGATE_BODIES = [
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "\\ud800 hi"}]}',
     "messages[0].content"),
    ("/v1/chat/completions", '{"messages": [{"role": "\\ud800", "content": "hi"}]}',
     "messages[0].role"),
    ("/v1/chat/completions",
     '{"messages": [{"role": "user", "content": "hi"}], "stop": ["a", "\\udfff"]}', "stop[1]"),
    ("/v1/completions", '{"prompt": "\\ud800 hi"}', "prompt"),
    ("/completion", '{"prompt": "hi", "stop": "\\ud800"}', "stop"),
    ("/tokenize", '{"content": "\\ud800"}', "content"),
    ("/apply-template", '{"messages": [{"role": "user", "content": "x\\udc00"}]}',
     "messages[0].content"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "raw", "field"), SURROGATE_BODIES)
def test_lone_surrogate_is_400_naming_the_field(server, path, raw, field):
    status, _, obj = server.request("POST", path, raw=raw.encode())
    assert status == 400, obj
    assert obj["error"]["code"] == "invalid_value"
    assert f"'{field}' holds a lone UTF-16 surrogate" in obj["error"]["message"]


@pytest.mark.parametrize(
    "raw",
    [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000],
    ids=["arrays", "objects"],
)
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
def test_deep_nesting_is_400_invalid_json(server, path, raw):
    status, _, obj = server.request("POST", path, raw=raw)
    assert status == 400, obj
    assert obj["error"]["code"] == "invalid_json"
    assert "nested 100000 levels deep" in obj["error"]["message"]


def test_ordinary_nesting_still_parses(server):
    deep = {"content": "hi", "ignored": json.loads("[" * 60 + "]" * 60)}
    status, _, obj = server.request("POST", "/tokenize", deep)
    assert status == 200 and obj["tokens"], obj


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("lora", [{"id": 0, "scale": 1.0}]),
        ("n_keep", -1),
        ("grammar_file", "g.gbnf"),
        ("slot_save_path", "/tmp"),
        ("chat_template_file", "t.jinja"),
    ],
)
def test_completion_fields_without_a_feature_are_refused(server, field, value):
    status, _, obj = server.request("POST", "/completion", {"prompt": "hi", field: value})
    assert status == 400, obj
    assert obj["error"]["code"] == "unsupported"
    assert field in obj["error"]["message"]


def test_defaults_of_those_fields_are_accepted(server):
    body = {"prompt": "hi", "n_predict": 2, "n_keep": 0, "lora": [], "grammar_file": None}
    status, _, obj = server.request("POST", "/completion", body)
    assert status == 200, obj


@pytest.mark.parametrize(
    "samplers",
    [
        # llama.cpp's default chain, and its web UI's string form of it
        ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
         "temperature"],
        "edskypmxt",
        # stages of it in its order (the others skipped), and an editor's chain
        ["top_k", "temperature"],
        ["top_k", "top_p", "infill"],
    ],
)  # fmt: skip
def test_the_default_sampler_chain_is_accepted(server, samplers):
    body = {"prompt": "hi", "n_predict": 2, "samplers": samplers}
    status, _, obj = server.request("POST", "/completion", body)
    assert status == 200, obj


@pytest.mark.parametrize("samplers", [["temperature", "top_k", "top_p", "min_p"], "tkpm"])
def test_another_sampler_chain_is_accepted(server, samplers):
    body = {"prompt": "hi", "n_predict": 2, "samplers": samplers}
    status, _, obj = server.request("POST", "/completion", body)
    assert status == 200, obj


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("samplers", ["x"], "unknown sampler 'x'"),
        ("samplers", ["infill", "top_k"], "the infill sampler (only last"),
        ("adaptive_target", 2, "'adaptive_target' must be a number <= 1"),
        ("repeat_penalty", 0, "'repeat_penalty' must be a number > 0"),
        ("mirostat", 3, "'mirostat' must be 0, 1 or 2"),
        ("dry_base", 0.5, "'dry_base' must be a number >= 1"),
        ("dry_sequence_breakers", "\n", "must be a non-empty list of strings"),
        ("logit_bias", {"": 1}, "a token's text is empty"),
        ("logit_bias", [[1, "a"]], "must be a number or false"),
    ],
)
def test_bad_sampler_settings_are_refused_by_name(server, field, value, says):
    body = {"prompt": "hi", "n_predict": 2, field: value}
    status, _, obj = server.request("POST", "/completion", body)
    assert status == 400 and says in obj["error"]["message"], obj


def test_sampler_settings_take_effect(server):
    """logit_bias in each of its forms (an id, the token's text) bans the greedy text's first
    token; the penalties, typical, XTC, DRY and mirostat fields are accepted."""
    body = {"prompt": "hi", "n_predict": 3, "temperature": 0, "return_tokens": True}
    status, _, plain = server.request("POST", "/completion", body)
    assert status == 200, plain
    first = plain["tokens"][0]
    _, _, piece = server.request("POST", "/detokenize", {"tokens": [first]})
    _, _, again = server.request("POST", "/tokenize", {"content": piece["content"]})
    assert first in again["tokens"], (piece, again)  # the text names the token
    text = piece["content"]
    for bias in ({str(first): -100}, [[first, False]], [[first, -1e9]], [[text, False]],
                 {text: -100}):  # fmt: skip
        status, _, obj = server.request("POST", "/completion", {**body, "logit_bias": bias})
        assert status == 200 and obj["tokens"][0] != first, obj
    extra = {"repeat_penalty": 1.3, "presence_penalty": 1.5, "frequency_penalty": 0.5,
             "repeat_last_n": -1, "typical_p": 0.9, "xtc_probability": 0.5,
             "top_n_sigma": 2.0, "dynatemp_range": 0.3, "min_keep": 1,
             "dry_multiplier": 0.8, "dry_allowed_length": 1,
             "dry_sequence_breakers": ["\n", "<|im_end|>"]}  # fmt: skip
    adaptive = {"samplers": ["min_p", "adaptive_p"], "adaptive_target": 0.3}
    for more in (extra, {"mirostat": 2, "mirostat_tau": 4.0}, {"mirostat": 1}, adaptive):
        status, _, obj = server.request(
            "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 3, "seed": 1, **more}
        )
        assert status == 200, obj


def test_client_gone_mid_body_leaves_no_traceback(server):
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"messages\":"
            )
    status, _, obj = server.request("GET", "/health")
    assert status == 200
    # the module's fixture checks the server's stderr, at its end, for a traceback


def test_sigterm_ends_the_server_while_a_body_never_ends(tiny_target):
    srv = Server(["-m", str(tiny_target), *FAST, "-c", "512"])
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
    try:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\n{\"mes\r\n"
        )
        status, _, _ = srv.request("GET", "/health")  # the first request is being read
        assert status == 200
        srv.proc.send_signal(signal.SIGTERM)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 503"), answer
    assert b'"shutting_down"' in answer
    # a generous bound: before, the shutdown waited 30 s for the body, then failed
    code, err = srv.stop(timeout=20)
    assert code == 0, err
    assert "Traceback" not in err and "CancelledError" not in err, err


def test_serve_on_loopback_says_nothing_about_keys(tiny_target):
    srv = Server(["-m", str(tiny_target), *FAST, "-c", "512"])
    assert srv.request("GET", "/health")[0] == 200
    code, err = srv.stop()
    assert code == 0, err
    assert "--api-key" not in err and "warning" not in err, err


# -- the second audit: numbers past a float, schemas and grammars that explode, /dev/zero -----

#: a JSON integer larger than any float (1e400 written out): JSON puts no bound on integers
HUGE_INT = "1" + "0" * 400


@pytest.mark.parametrize("field", ["temperature", "top_p", "min_p", "speculative.p_min"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/completion"])
def test_an_integer_past_a_float_is_400_naming_the_field(server, path, field):
    chat = '{"messages": [{"role": "user", "content": "hi"}]'
    body = chat if "chat" in path else '{"prompt": "hi"'
    raw = f'{body}, "max_tokens": 2, "{field}": {HUGE_INT}}}'.encode()
    status, _, obj = server.request("POST", path, raw=raw)
    assert status == 400, obj
    assert f"'{field}' must be a number" in obj["error"]["message"]


@pytest.mark.parametrize("prompt", [[1.5], [7, True], [{"a": 1}], [None]])
def test_a_prompt_list_of_non_ids_is_named_as_such(server, prompt):
    status, _, obj = server.request("POST", "/v1/completions", {"prompt": prompt})
    assert status == 400, obj
    # before: "only one prompt per request is supported", about a list that holds one
    assert obj["error"]["message"] == "'prompt' must be a string or a list of token ids"
    status, _, obj = server.request("POST", "/v1/completions", {"prompt": ["a", [1]]})
    assert status == 400 and obj["error"]["code"] == "unsupported", obj


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/apply-template"])
def test_deep_json_in_an_earlier_calls_arguments_is_no_500(server, path):
    deep = "[" * 100_000 + "]" * 100_000  # a string in the body: its nesting is not the body's
    call = {"id": "1", "type": "function", "function": {"name": "f", "arguments": deep}}
    body = {
        "messages": [{"role": "user", "content": "hi"},
                     {"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "content": "x", "tool_call_id": "1"}],
        "tools": [{"type": "function", "function": {"name": "f"}}], "max_tokens": 2,
    }  # fmt: skip
    status, _, obj = server.request("POST", path, body)
    assert status == 200, obj  # before: 500, RecursionError


def test_is_number_refuses_what_no_float_holds():
    from specgguf.io.sampling_fields import is_number

    assert not is_number(int(HUGE_INT)) and not is_number(float("inf"))
    assert is_number(2**80) and is_number(0.5)


def _limited(code: str) -> subprocess.CompletedProcess:
    """`code` in a Python of its own held to 1 GiB of address space: what allocates without
    bound fails there (MemoryError) instead of taking the machine's memory."""
    prelude = "import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code], capture_output=True, text=True, cwd=ROOT,
        timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "minLength": 10**9},
        {"type": "array", "items": {"type": "string"}, "minItems": 10**9},
        {"type": "object", "properties": {"a": {"type": "string", "maxLength": 2**80}}},
        {"type": "string", "pattern": "^(ab){999999999}$"},
        {"anyOf": [{"type": "string", "minLength": 60_000}] * 2},  # each fine, not the sum
    ],
    ids=["minLength", "minItems", "maxLength", "pattern", "sum"],
)
def test_a_schema_asking_for_too_many_repetitions_is_refused_before_converting(schema):
    code = (
        "import json, sys\n"
        "from specgguf.binding.grammar import GrammarError, schema_to_gbnf\n"
        f"try:\n    schema_to_gbnf(json.loads({json.dumps(json.dumps(schema))}), 'x')\n"
        "except GrammarError as e:\n    print(e)\n"
    )
    res = _limited(code)
    assert res.returncode == 0, res.stderr
    assert "repetitions in all" in res.stdout, res.stdout


def test_ordinary_repetition_counts_still_convert():
    from specgguf.binding.grammar import schema_to_gbnf

    gbnf = schema_to_gbnf({"type": "array", "items": {"type": "string", "maxLength": 50},
                           "minItems": 2, "maxItems": 500})  # fmt: skip
    assert "root ::=" in gbnf


def _deep_groups(n: int) -> str:
    return "root ::= " + "(" * n + '"a"' + ")" * n + "\n"


def _rule_chain(n: int) -> str:
    return "root ::= r0\n" + "".join(f"r{i} ::= r{i + 1}\n" for i in range(n)) + f'r{n} ::= "a"\n'


@pytest.mark.parametrize(
    ("flag", "text"),
    [
        ("--grammar-file", _deep_groups(60_000)),  # llama.cpp's parser overflowed the C stack
        ("--grammar-file", _rule_chain(200_000)),  # so did its walk of the rules
        ("-jf", json.dumps({"type": "string", "maxLength": 30_000})),  # 30,000 nested groups
        ("-jf", json.dumps({"enum": list(range(100_000))})),  # two minutes before a token
        # 24 KB expanded into 4 million nested rules: over ten minutes, deaf to SIGTERM
        ("--grammar-file", "root ::= " + '"a"{0,1999} ' * 2000 + "\n"),
    ],
    ids=["groups", "rule-chain", "maxLength", "enum", "repetitions"],
)
def test_a_grammar_too_large_for_llama_cpp_is_one_line(tiny_target, tmp_path, flag, text):
    path = tmp_path / "g"
    path.write_text(text)
    code, out, err = specgguf(
        "run", "-m", tiny_target, "--spec-type", "none", "-p", "hi", "-n", "1", "-t", "1",
        "-c", "256", flag, path,
    )  # fmt: skip
    assert code == ExitCode.USAGE, err  # before: killed by SIGSEGV, or minutes of work
    line = one_line(err)
    assert "parts (rules, groups, alternatives and repeated items; at most" in line, line


def test_grammar_parts_count_rules_groups_alternatives_and_repetitions():
    from specgguf.grammars.grammar_bounds import grammar_parts

    assert grammar_parts('root ::= ("a" | b)\nb ::= [a-z]{2,5}') == 2 + 1 + 1 + 5
    # nothing counts inside literals, character classes and comments
    assert grammar_parts('root ::= "(|{9}::=" [({|]{3} # ( | {99}') == 1 + 3


def test_a_grammar_of_ordinary_size_still_runs(tiny_target, tmp_path):
    path = tmp_path / "g"
    path.write_text(json.dumps({"enum": list(range(2000))}))
    code, out, err = specgguf(
        "run", "-m", tiny_target, "--spec-type", "none", "-p", "hi", "-n", "2", "-t", "1",
        "-c", "256", "--temp", "0", "-jf", path,
    )  # fmt: skip
    assert code == 0, err
    assert out.strip().isdigit(), out


def test_a_schema_too_large_is_400_and_the_server_lives(server):
    body = {"prompt": "hi", "n_predict": 2, "json_schema": {"type": "string", "minLength": 10**9}}
    status, _, obj = server.request("POST", "/completion", body)  # before: the server died
    assert status == 400, obj
    assert obj["error"]["code"] == "invalid_schema"
    grammar = {"prompt": "hi", "n_predict": 2, "grammar": _deep_groups(60_000)}
    status, _, obj = server.request("POST", "/completion", grammar)
    assert status == 400 and obj["error"]["code"] == "invalid_grammar", obj
    assert server.request("GET", "/health")[0] == 200


def test_a_deeply_nested_schema_file_is_one_line(tiny_target, tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{"type": "array", "items": ' * 100_000 + "{}" + "}" * 100_000)
    code, out, err = specgguf("run", "-m", tiny_target, "-p", "hi", "-n", "1", "-jf", path)
    assert code == ExitCode.USAGE, err
    assert "nested 100001 levels deep" in one_line(err)


def test_a_temperature_that_overflows_the_logits_is_greedy():
    import numpy as np

    from specgguf.core.sampling import SamplerParams, chain_on_sorted

    params = SamplerParams(temp=1e-320, top_p=1.0, min_p=0.0)
    d = chain_on_sorted(np.arange(3), np.array([-2.0, -3.0, -9.0]), params)
    # before: NaN, and a token drawn at random (tokens of probability 0 may be left out)
    assert [d.prob(t) for t in range(3)] == [1.0, 0.0, 0.0]
    tie = chain_on_sorted(np.arange(3), np.array([4.0, 4.0, 1.0]), params)
    assert [tie.prob(t) for t in range(3)] == [0.5, 0.5, 0.0]


def _zero_run(*argv: str, stdin=subprocess.DEVNULL) -> tuple[int, str, str]:
    """`specgguf` held to 4 GiB of address space: reading /dev/zero whole fails there."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    res = subprocess.run(
        [sys.executable, "-m", "specgguf_cli.app", *argv], capture_output=True, text=True,
        cwd=ROOT, env=env(), timeout=300, stdin=stdin, preexec_fn=limit,
    )  # fmt: skip
    return res.returncode, res.stdout, res.stderr


@pytest.mark.parametrize(
    ("args", "code", "what"),
    [
        (["run", "-f", "/dev/zero"], ExitCode.PROMPT, "-f /dev/zero"),
        (["run", "-p", "hi", "--grammar-file", "/dev/zero"], ExitCode.USAGE,
         "--grammar-file /dev/zero"),
        (["run", "-p", "hi", "-jf", "/dev/zero"], ExitCode.USAGE, "-jf /dev/zero"),
        (["bench", "-f", "/dev/zero", "--no-warmup"], ExitCode.PROMPT, "-f /dev/zero"),
    ],
    ids=["prompt", "grammar", "schema", "bench"],
)
def test_an_endless_file_is_one_line(tiny_target, args, code, what):
    got, out, err = _zero_run(*args, "-m", str(tiny_target), "-n", "1", "-t", "1", "-c", "256")
    assert got == code, err
    assert one_line(err) == f"error: {what}: larger than {MAX_TEXT_BYTES} bytes"


def test_an_endless_stdin_is_one_line(tiny_target):
    with open("/dev/zero", "rb") as zero:
        got, out, err = _zero_run("run", "-m", str(tiny_target), "-n", "1", stdin=zero)
    assert got == ExitCode.PROMPT, err
    assert one_line(err) == f"error: stdin: larger than {MAX_TEXT_BYTES} bytes"


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_an_endless_jsonl_line_is_an_error_object(tiny_target, source):
    argv = ["run", "-m", str(tiny_target), "-n", "1", "-t", "1", "-c", "256", "--jsonl"]
    with open("/dev/zero", "rb") as zero:
        if source == "file":
            got, out, err = _zero_run(*argv, "-f", "/dev/zero")
        else:
            got, out, err = _zero_run(*argv, stdin=zero)
    assert got == ExitCode.BATCH_PARTIAL, err
    assert "Traceback" not in err
    obj = json.loads(out)
    assert obj["line"] == 1 and obj["error"]["code"] == ExitCode.PROMPT
    message = obj["error"]["message"]
    assert f"longer than {MAX_TEXT_BYTES} bytes; the rest of the input is not read" in message


def test_a_connection_that_never_sends_a_request_is_closed_after_the_timeout(tiny_target):
    srv = Server(["-m", str(tiny_target), *FAST, "-c", "512", "--timeout", "2"])
    try:
        silent = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
        half = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
        half.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # the head never ends
        # before: both stayed open for ever (the recv below timed out); now the server closes
        # them, with nothing to say: no request arrived
        assert silent.recv(100) == b""
        assert half.recv(100) == b""
        silent.close()
        half.close()
        # a request that does arrive is still answered
        with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as slow:
            slow.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert slow.recv(100).startswith(b"HTTP/1.1 200")
    finally:
        code, err = srv.stop()
    assert code == 0, err
    assert "Traceback" not in err, err


# -- 3. open connections are bounded (--max-connections) ----------------------------------------


def test_max_connections_below_what_the_requests_hold_is_refused(tiny_target):
    code, out, err = specgguf(
        "serve", "-m", tiny_target, "-np", "2", "--max-queue", "8", "--max-connections", "9"
    )
    assert code == ExitCode.USAGE, err
    line = one_line(err)
    assert "--max-connections: 9 (must be 10..65536" in line, line


def _recv_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_connection_past_max_connections_is_503_with_an_error_object(tiny_target):
    srv = Server(["-m", str(tiny_target), *FAST, "-c", "512", "-np", "1", "--max-queue", "1",
                  "--max-connections", "3"])  # fmt: skip
    idle = []
    try:
        # three connections that send nothing (each would hold its socket until --timeout)
        idle = [socket.create_connection(("127.0.0.1", srv.port), timeout=60) for _ in range(3)]
        with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as extra:
            answer = _recv_all(extra)  # answered and closed at once, before any request
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 "), answer
        assert b"retry-after: 1" in head.lower()
        err = json.loads(body)["error"]
        assert err["code"] == "too_many_connections" and "--max-connections 3" in err["message"]
        # one idle connection goes: there is room again (once the server has seen it close)
        idle.pop().close()
        for _ in range(600):
            with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as s:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                got = _recv_all(s)
            if not got.startswith(b"HTTP/1.1 503"):
                break
        assert got.startswith(b"HTTP/1.1 200"), got
    finally:
        for s in idle:
            s.close()
        code, err = srv.stop()
    assert code == 0, err
    assert "Traceback" not in err, err


@pytest.mark.parametrize(
    "raw",
    [
        b"GARBAGE\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    ],
    ids=["not-http", "bad-header", "bad-length"],
)
def test_malformed_http_is_a_400_error_object(server, raw):
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(raw)
        answer = _recv_all(s)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), answer
    assert b"content-type: application/json" in head.lower(), answer
    err = json.loads(body)["error"]
    assert err["code"] == "invalid_http_request" and err["type"] == "invalid_request_error"
    status, _, _ = server.request("GET", "/health")  # and the server goes on
    assert status == 200
