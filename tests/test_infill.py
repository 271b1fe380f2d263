"""Fill-in-the-middle through `specgguf serve` on the tiny models: `/infill` as llama.vscode
and llama.vim send it (their exact request bodies, and the fields they read back), the prompt
laid out in the model's FIM tokens, `/v1/completions` with a `suffix`, and the refusals."""

from __future__ import annotations

import json

import pytest

from tests.serve_helpers import FAST, serving, sse_events
from tests.tiny_models import TARGET_SEED, build_tiny_model, fim_ids

N = 12

#: llama.vim's request (its fields and defaults): the lines above the cursor, the current
#: line up to the cursor as `prompt`, the rest below, ring chunks as input_extra
LLAMA_VIM = {
    "id_slot": 0,
    "input_prefix": "def fib(n):\n    if n <= 1:\n        return n\n",
    "input_suffix": "\n\ndef main():\n    print(fib(10))\n",
    "input_extra": [{"filename": "util.py", "text": "def add(a, b):\n    return a + b\n"}],
    "prompt": "    ",
    "n_predict": N,
    "stop": [],
    "n_indent": 4,
    "top_k": 40,
    "top_p": 0.90,
    "samplers": ["top_k", "top_p", "infill"],
    "stream": False,
    "cache_prompt": True,
    "t_max_prompt_ms": 500,
    "t_max_predict_ms": 1000,
    "response_fields": [
        "content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms",
        "timings/prompt_per_second", "timings/predicted_n", "timings/predicted_ms",
        "timings/predicted_per_token_ms", "timings/predicted_per_second", "truncated",
        "tokens_cached",
    ],
}  # fmt: skip
#: llama.vim's cache warm-up: the extra chunks alone, nothing generated, nothing read back
LLAMA_VIM_WARMUP = {
    "id_slot": 0,
    "input_prefix": "",
    "input_suffix": "",
    "input_extra": LLAMA_VIM["input_extra"],
    "prompt": "",
    "n_predict": 0,
    "temperature": 0.0,
    "samplers": [],
    "stream": False,
    "cache_prompt": True,
    "t_max_prompt_ms": 1,
    "t_max_predict_ms": 1,
    "response_fields": [""],
}
#: llama.vscode's request: its defaults (top_k, top_p, samplers, cache_prompt) and the rest;
#: it reads content, tokens_cached, truncated, generation_settings and timings
LLAMA_VSCODE = {
    "input_prefix": "import os\n\ndef list_files(path):\n",
    "input_suffix": "\n",
    "input_extra": [{"filename": "main.py", "text": "print(list_files('.'))\n"}],
    "prompt": "    return ",
    "n_predict": N,
    "top_k": 40,
    "top_p": 0.99,
    "stream": False,
    "samplers": ["top_k", "top_p", "infill"],
    "cache_prompt": True,
    "t_max_prompt_ms": 500,
    "t_max_predict_ms": 2500,
}
VSCODE_READS = ("content", "tokens_cached", "truncated", "generation_settings", "timings")
TIMINGS_READ = ("prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms",
                "predicted_per_second")  # fmt: skip


@pytest.fixture(scope="module")
def fim_target(tmp_path_factory):
    path = tmp_path_factory.mktemp("fim") / "fim.gguf"
    return build_tiny_model(path, seed=TARGET_SEED, fim=True)


@pytest.fixture(scope="module")
def server(fim_target, tiny_draft):
    # a batch of 512: llama-server's budget leaves the extra context 2048 - 512 - 2 * n_predict
    yield from serving(["-m", str(fim_target), "-md", str(tiny_draft), *FAST, "-c", "2048",
                        "-b", "512"])  # fmt: skip


def test_llama_vim_body_gets_the_fields_it_reads(server):
    r = server.post("/infill", LLAMA_VIM)
    assert set(r) == set(LLAMA_VIM["response_fields"])
    assert isinstance(r["content"], str) and r["truncated"] is False
    assert r["timings/prompt_n"] + r["tokens_cached"] > 0


def test_tokens_cached_is_what_the_cache_holds_after_the_answer(server):
    # llama-server's count, which llama.vim shows as the context in use: the prompt and
    # every generated token but the last (never evaluated)
    body = {k: v for k, v in LLAMA_VIM.items() if k != "response_fields"}
    r = server.post("/infill", {**body, "temperature": 0, "samplers": None})
    assert r["timings"]["predicted_n"] > 1
    assert r["tokens_cached"] == r["tokens_evaluated"] + r["timings"]["predicted_n"] - 1


def test_llama_vim_warmup_answers_nothing(server):
    assert server.post("/infill", LLAMA_VIM_WARMUP) == {}


def test_llama_vscode_body_gets_the_fields_it_reads(server):
    r = server.post("/infill", LLAMA_VSCODE)
    assert all(k in r for k in VSCODE_READS)
    assert all(k in r["timings"] for k in TIMINGS_READ)
    assert isinstance(r["content"], str) and r["stop"] is True
    # the chain is the one it asked for: no temperature stage (so no greedy pick), no min-p
    assert r["generation_settings"]["samplers"] == ["top_k", "top_p", "infill"]


def plain(server, text: str) -> list[int]:
    body = {"content": text, "add_special": False, "parse_special": False}
    return server.post("/tokenize", body)["tokens"]


def test_prompt_is_laid_out_in_the_fim_tokens(server):
    ids = fim_ids()
    body = {"input_prefix": "ab", "input_suffix": "cd", "prompt": "e", "n_predict": N,
            "input_extra": [{"filename": "f", "text": "g"}], "temperature": 0}  # fmt: skip
    expected = [
        ids["rep"], *plain(server, "myproject\n"), ids["sep"], *plain(server, "f\n"),
        *plain(server, "g"), ids["sep"], *plain(server, "filename\n"),
        ids["pre"], *plain(server, "ab"), *plain(server, "e"), ids["suf"], *plain(server, "cd"),
        ids["mid"],
    ]  # fmt: skip
    r = server.post("/infill", {**body, "speculative": False, "cache_prompt": False})
    assert r["tokens_evaluated"] == len(expected)
    same = server.post("/completion", {"prompt": expected, "n_predict": N, "temperature": 0,
                                       "speculative": False, "cache_prompt": False})  # fmt: skip
    assert r["content"] == same["content"] and len(r["content"]) > 0


def test_spm_infill_lays_the_suffix_out_first(fim_target):
    ids = fim_ids()
    for s in serving(["-m", str(fim_target), *FAST, "-c", "2048", "-b", "512", "--spm-infill"]):
        body = {"input_prefix": "ab", "input_suffix": "cd", "n_predict": 4, "temperature": 0}
        expected = [
            ids["rep"], *plain(s, "myproject\n"), ids["sep"], *plain(s, "filename\n"),
            ids["suf"], *plain(s, "cd"), ids["pre"], *plain(s, "ab"), ids["mid"],
        ]  # fmt: skip
        r = s.post("/infill", {**body, "cache_prompt": False})
        assert r["tokens_evaluated"] == len(expected)
        same = s.post("/completion", {"prompt": expected, "n_predict": 4, "temperature": 0,
                                      "cache_prompt": False})  # fmt: skip
        assert r["content"] == same["content"]


def test_openai_suffix_is_the_same_infill(server):
    same = {"temperature": 0, "speculative": False}
    infill = server.post("/infill", {"input_prefix": "x = ", "input_suffix": "\ny = 2\n",
                                     "n_predict": N, **same})  # fmt: skip
    body = {"prompt": "x = ", "suffix": "\ny = 2\n", "max_tokens": N, **same}
    oai = server.post("/v1/completions", body)
    assert oai["choices"][0]["text"] == infill["content"]


def test_streamed_infill(server):
    whole = server.post("/infill", {**LLAMA_VSCODE, "temperature": 0, "samplers": None})
    conn, resp = server.stream("/infill", {**LLAMA_VSCODE, "temperature": 0, "samplers": None,
                                           "stream": True})  # fmt: skip
    events = list(sse_events(resp))
    conn.close()
    assert events[-1]["stop"] is True
    assert "".join(e["content"] for e in events) == whole["content"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"input_suffix": ""}, "input_prefix"),
        ({"input_prefix": "", "input_suffix": 3}, "input_suffix"),
        ({"input_prefix": "", "input_suffix": "", "input_extra": {}}, "input_extra"),
        ({"input_prefix": "", "input_suffix": "", "input_extra": [{"filename": "a"}]},
         "input_extra[0]"),
        ({"input_prefix": "", "input_suffix": "", "samplers": ["infill", "top_k"]}, "samplers"),
        ({"input_prefix": "", "input_suffix": "", "samplers": ["infill"]}, "top_k"),
        ({"input_prefix": "", "input_suffix": "", "n_indent": -1}, "n_indent"),
        ({"input_prefix": "", "input_suffix": "", "response_fields": "content"},
         "response_fields"),
    ],
)  # fmt: skip
def test_bad_infill_requests_get_400(server, body, says):
    status, _, r = server.request("POST", "/infill", body)
    assert status == 400 and says in r["error"]["message"]


def test_a_model_without_fim_tokens_says_so(tiny_target):
    for s in serving(["-m", str(tiny_target), *FAST, "-c", "512"]):
        status, _, r = s.request("POST", "/infill", {"input_prefix": "a", "input_suffix": "b"})
        assert status == 400 and "no FIM prefix, suffix, middle token" in r["error"]["message"]
        status, _, r = s.request("POST", "/v1/completions", {"prompt": "a", "suffix": "b"})
        assert status == 400 and "fill-in-the-middle" in r["error"]["message"]


def test_run_fim_suffix_fills_the_same_middle(server, fim_target, capsys):
    from specgguf_cli.app import run_cli

    # the server's context and batch: the same passes, the same greedy text
    argv = ["run", "-m", str(fim_target), *FAST, "-c", "2048", "-b", "512", "--json",
            "--spec-type", "none", "-n", N, "-p", "x = ", "--fim-suffix", "\ny = 2\n"]  # fmt: skip
    code = run_cli(list(map(str, argv)))
    out = capsys.readouterr().out
    assert code == 0, out
    body = {"input_prefix": "x = ", "input_suffix": "\ny = 2\n", "n_predict": N,
            "temperature": 0, "speculative": False}  # fmt: skip
    assert json.loads(out)["text"] == server.post("/infill", body)["content"]


def test_run_fim_suffix_refusals(tiny_target, capsys):
    from specgguf_cli.app import run_cli

    from specgguf.errors import ExitCode

    base = ["run", "-m", str(tiny_target), *FAST, "-c", "512", "-n", "4", "-p", "a"]
    assert run_cli([*base, "--fim-suffix", "b"]) == ExitCode.PROMPT
    assert "no FIM prefix, suffix, middle token" in capsys.readouterr().err
    assert run_cli([*base, "--fim-suffix", "b", "--chat"]) == ExitCode.USAGE
    assert "--fim-suffix" in capsys.readouterr().err
