"""`specgguf run` end to end on the tiny models: --json, --color, --trace, --chat, -cnv,
--chat-template-file, the loading status, and the usage errors that come before any load."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from specgguf_cli.app import run_cli

from specgguf.errors import ExitCode
from specgguf.io.output import ACCEPTED_STYLE, LEGEND, RESET
from tests.tiny_models import TARGET_SEED, build_tiny_model

FAST = ["-t", "1", "-c", "512", "-fa", "off"]
ESC = re.compile(r"\x1b\[[0-9;]*m")
JSON_KEYS = {
    "text",
    "stop_reason",
    "tokens_predicted",
    "tokens_evaluated",
    "model",
    "draft_model",
    "spec_type",
    "seed",
    "timings",
    "kv_rollback",
}


def chatml(*turns: tuple[str, str]) -> str:
    return "".join(f"<|im_start|>{r}\n{c}<|im_end|>\n" for r, c in turns) + (
        "<|im_start|>assistant\n"
    )


@pytest.fixture
def run(tiny_target, tiny_draft, capsys):
    """run(*args) -> (exit code, stdout, stderr) of `specgguf run -m T -md D <fast> *args`."""

    def _run(*args, model=None, draft=True):
        argv = ["run", "-m", str(model or tiny_target)]
        if draft:
            argv += ["-md", str(tiny_draft)]
        code = run_cli([*argv, *FAST, *map(str, args)])
        out = capsys.readouterr()
        return code, out.out, out.err

    return _run


def as_json(result) -> dict:
    code, out, _ = result
    assert code == 0
    return json.loads(out)


# -- --json keeps its shape -------------------------------------------------------------------


def test_json_keys_unchanged(run, tiny_target, tiny_draft):
    obj = as_json(run("-p", "the cat sat on", "-n", "10", "--temp", "0", "--json"))
    assert set(obj) == JSON_KEYS | {"auto"}  # --spec-draft-n-max auto is the default
    fixed = as_json(
        run("-p", "the cat sat on", "-n", "10", "--temp", "0", "--json", "--spec-draft-n-max", "3")
    )
    assert set(fixed) == JSON_KEYS and fixed["text"] == obj["text"]
    assert obj["tokens_predicted"] == 10 and obj["stop_reason"] == "limit"
    assert obj["model"] == str(tiny_target) and obj["draft_model"] == str(tiny_draft)
    # no --spec-type under auto: the free lookups join the draft model
    assert obj["spec_type"] == ["ngram-map-k", "suffix", "draft-simple"]
    assert fixed["spec_type"] == ["draft-simple"]  # a fixed length: llama.cpp's meaning


# -- colour -----------------------------------------------------------------------------------


def test_color_always_marks_accepted_tokens(run):
    args = ("-p", "the cat sat on", "-n", "32", "--temp", "0")
    code, coloured, err = run(*args, "--color", "always")
    assert code == 0
    assert ACCEPTED_STYLE in coloured and RESET in coloured
    assert LEGEND in err.splitlines()
    code, plain, err_plain = run(*args, "--color", "never")
    assert ESC.search(plain) is None and LEGEND not in err_plain
    assert ESC.sub("", coloured) == plain
    # the coloured characters are exactly the tokens from accepted drafts
    n_accept = int(re.search(r"n_accept\s+=\s+(\d+)", err).group(1))
    assert n_accept > 0
    assert coloured.count(ACCEPTED_STYLE) <= n_accept


def test_color_auto_is_off_when_piped_on_for_a_terminal(run, monkeypatch):
    # a fixed draft length: auto would (rightly) not draft with these tiny models
    args = ("-p", "the cat sat on", "-n", "24", "--temp", "0", "--spec-draft-n-max", "3")
    _, out, err = run(*args)  # capsys: not a terminal
    assert ESC.search(out) is None and LEGEND not in err
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    _, out, err = run(*args, "--color", "auto")
    assert ACCEPTED_STYLE in out and LEGEND in err
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    _, out, _ = run(*args)
    assert ESC.search(out) is None


def test_color_never_in_json(run):
    obj = as_json(run("-p", "the cat", "-n", "16", "--temp", "0", "--json", "--color", "always"))
    assert ESC.search(obj["text"]) is None


def test_piped_subprocess_has_no_colour(tiny_target, tiny_draft):
    exe = Path(sys.executable).with_name("specgguf")
    cmd = [str(exe), "run", "-m", str(tiny_target), "-md", str(tiny_draft), *FAST]
    cmd += ["-p", "the cat sat on", "-n", "16", "--temp", "0"]
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    proc = subprocess.run(cmd, capture_output=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert b"\x1b[" not in proc.stdout and proc.stdout.strip()
    assert LEGEND.encode() not in proc.stderr
    assert b"loading" not in proc.stderr  # no status when stderr is not a terminal


# -- trace ------------------------------------------------------------------------------------


def test_trace_accepted_counts_sum_to_n_accept(run, tmp_path):
    trace = tmp_path / "trace.jsonl"
    code, out, err = run(
        "-p", "Once upon a time, in a land", "-n", "48", "--temp", "0", "--json",
        "--trace", trace, "--spec-draft-n-max", "4",
    )  # fmt: skip
    assert code == 0
    obj = json.loads(out)
    recs = [json.loads(x) for x in trace.read_text().splitlines()]
    t = obj["timings"]
    assert sum(r["n_accepted"] for r in recs) == t["draft_n_accepted"] > 0
    assert int(re.search(r"n_accept\s+=\s+(\d+)", err).group(1)) == t["draft_n_accepted"]
    assert sum(len(r["proposed"]) for r in recs) == t["draft_n"]
    # the first record is the prompt's round: its token came from the prompt's pass
    assert recs[0]["from_prompt"] and not any(r["from_prompt"] for r in recs[1:])
    assert len(recs) == 1 + t["rounds"] + t["plain_steps"]
    assert [r["round"] for r in recs] == list(range(len(recs)))
    assert "".join("".join(r["emitted_text"]) for r in recs) == obj["text"]
    for r in recs:
        assert set(r) >= {"round", "drafter", "proposed", "n_accepted", "emitted",
                          "target_probs", "draft_ms", "verify_ms", "rollback_ms"}  # fmt: skip
        assert len(r["target_probs"]) == len(r["proposed"]) <= 4
        assert r["emitted"][: r["n_accepted"]] == r["proposed"][: r["n_accepted"]]
        # greedy: the target's distribution is one-hot, accepted proposals have p = 1
        assert all(p == 1.0 for p in r["target_probs"][: r["n_accepted"]])
        if r["n_accepted"] < len(r["proposed"]):
            assert r["target_probs"][r["n_accepted"]] == 0.0
        assert (r["drafter"] is None) == (not r["proposed"])


def test_trace_unwritable_fails_before_loading(run, tmp_path):
    code, _, err = run("-p", "x", "--trace", tmp_path / "no" / "such" / "t.jsonl")
    assert code == ExitCode.USAGE and "--trace" in err
    code, _, err = run("-p", "x", "--trace", tmp_path)
    assert code == ExitCode.USAGE and "is a directory" in err


# -- chat -------------------------------------------------------------------------------------


def test_chat_flag_uses_the_gguf_template(run):
    args = ("-n", "12", "--temp", "0", "--json", "-q")
    chat = as_json(run("--chat", "-p", "hi", *args))
    raw = as_json(run("-p", chatml(("user", "hi")), *args))
    assert (chat["text"], chat["tokens_evaluated"]) == (raw["text"], raw["tokens_evaluated"])
    sys_chat = as_json(run("-sys", "be brief", "-p", "hi", *args))  # -sys implies --chat
    sys_raw = as_json(run("-p", chatml(("system", "be brief"), ("user", "hi")), *args))
    assert sys_chat["text"] == sys_raw["text"]
    assert sys_chat["tokens_evaluated"] == sys_raw["tokens_evaluated"]
    plain = as_json(run("-p", "hi", *args))  # -m given: no chat by default
    assert plain["tokens_evaluated"] == 2


def test_chat_is_default_for_the_default_pair(run, tiny_target, tiny_draft, monkeypatch, capsys):
    monkeypatch.setattr(
        "specgguf.modelfiles.models.require_default_pair",
        lambda: (Path(tiny_target), Path(tiny_draft)),
    )
    args = ["-n", "8", "--temp", "0", "--json", "-q", "-p", "hi"]
    assert run_cli(["run", *FAST, *args]) == 0
    default = json.loads(capsys.readouterr().out)
    assert run_cli(["run", *FAST, *args, "--no-chat"]) == 0
    no_chat = json.loads(capsys.readouterr().out)
    ref = as_json(run("-p", chatml(("user", "hi")), "-n", "8", "--temp", "0", "--json"))
    assert default["tokens_evaluated"] == ref["tokens_evaluated"] != no_chat["tokens_evaluated"]
    assert default["text"] == ref["text"]


def test_chat_template_file_overrides(run, tmp_path):
    f = tmp_path / "t.jinja"
    f.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[bot] ")
    args = ("-n", "8", "--temp", "0", "--json", "-q")
    a = as_json(run("--chat", "--chat-template-file", f, "-p", "hi", *args))
    b = as_json(run("-p", "[user] hi\n[bot] ", *args))
    assert (a["text"], a["tokens_evaluated"]) == (b["text"], b["tokens_evaluated"])
    code, _, err = run("--chat", "--chat-template-file", tmp_path / "nope", "-p", "hi")
    assert code == ExitCode.USAGE and "no such file" in err
    f.write_text("{% for %}")
    code, _, err = run("--chat", "--chat-template-file", f, "-p", "hi", "-n", "1")
    assert code == ExitCode.USAGE and "line 1" in err


def test_model_without_template_falls_back_to_chatml(run, tmp_path):
    bare = build_tiny_model(tmp_path / "bare.gguf", seed=TARGET_SEED, chat_template=None)
    code, out, err = run("--chat", "-p", "hi", "-n", "4", "--temp", "0", "--json",
                         model=bare, draft=False)  # fmt: skip
    assert code == 0 and "using ChatML" in err
    ref = as_json(run("-p", chatml(("user", "hi")), "-n", "4", "--temp", "0", "--json"))
    assert json.loads(out)["tokens_evaluated"] == ref["tokens_evaluated"]


def test_chat_stops_at_end_of_turn(tmp_path, capsys):
    eager = build_tiny_model(tmp_path / "eos.gguf", seed=TARGET_SEED, eos_logit_bias=40.0)
    argv = ["run", "-m", str(eager), *FAST, "--chat", "-p", "hi", "-n", "20", "--json", "-q"]
    assert run_cli(argv) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["stop_reason"] == "eos" and obj["text"] == ""


def test_conversation_keeps_context(run, monkeypatch, tmp_path):
    trace = tmp_path / "t.jsonl"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"hi\n\nwhat\\\nnext\n")))
    code, out, err = run("-cnv", "-sys", "S", "-n", "6", "--temp", "0", "--trace", trace)
    assert code == 0
    recs = [json.loads(x) for x in trace.read_text().splitlines()]
    assert {r["turn"] for r in recs} == {0, 1}  # the blank line is not a turn
    answers = ["".join("".join(r["emitted_text"]) for r in recs if r["turn"] == t) for t in (0, 1)]
    assert out == "".join(a if a.endswith("\n") else a + "\n" for a in answers)
    assert len(re.findall(r"^\[6 tokens", err, re.M)) == 2
    # turn 2 sees the whole conversation: it is what --no-chat gives on the rendered text
    convo = chatml(
        ("system", "S"), ("user", "hi"), ("assistant", answers[0]), ("user", "what\nnext")
    )
    ref = as_json(run("-p", convo, "-n", "6", "--temp", "0", "--json"))
    assert ref["text"] == answers[1]
    turns = [(int(a), int(b)) for a, b in re.findall(r"prompt (\d+) tokens \((\d+) reused\)", err)]
    # turn 2 evaluated only what the KV cache did not hold (prefix reuse), and the two parts
    # add up to the whole conversation
    assert turns[0][1] == 0 and turns[1][1] > turns[0][0]
    assert sum(turns[1]) == ref["tokens_evaluated"] > turns[1][0]


def test_conversation_first_turn_from_p_and_exit_command(run, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"/exit\nnever read\n")))
    code, out, err = run("-cnv", "-p", "hi", "-n", "4", "--temp", "0")
    assert code == 0
    assert len(re.findall(r"^\[4 tokens", err, re.M)) == 1
    ref = as_json(run("-p", chatml(("user", "hi")), "-n", "4", "--temp", "0", "--json"))
    assert out == ref["text"] + "\n"


def test_conversation_that_outgrows_the_context(run, monkeypatch):
    long_turn = ("the cat " * 300 + "\n").encode()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(long_turn)))
    code, _, err = run("-cnv", "-n", "4", "--temp", "0")
    assert code == ExitCode.PROMPT and "no longer fits" in err


# -- loading status ---------------------------------------------------------------------------


def test_loading_status_only_on_a_terminal(run, monkeypatch):
    args = ("-p", "hi", "-n", "2", "--temp", "0")
    _, _, err = run(*args)
    assert "loading" not in err
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich: treat stderr as a terminal
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("TTY_INTERACTIVE", "1")
    _, _, err = run(*args)
    assert "loading target.gguf + draft draft.gguf" in err
    _, _, err = run(*args, "-q")
    assert err == ""


# -- usage errors come before any model is loaded ---------------------------------------------


@pytest.mark.parametrize(
    "args, match",
    [
        (["--color", "purple", "-p", "x"], "--color"),
        (["--no-chat", "-cnv"], "needs the chat template"),
        (["--no-chat", "-sys", "S", "-p", "x"], "needs the chat template"),
        (["-cnv", "--json"], "--json cannot be combined"),
    ],
)
def test_usage_errors(args, match, capsys):
    code = run_cli(["run", "-m", "/nonexistent.gguf", *args])
    assert code == ExitCode.USAGE
    assert match in capsys.readouterr().err


def test_auto_n_max_is_lossless_and_reports_its_choices(run):
    """--spec-draft-n-max auto only changes how much is drafted: the text equals plain
    greedy decoding, and the JSON says which k the policy chose each round."""
    args = ("-p", "the cat sat on", "-n", "96", "--temp", "0", "--ignore-eos", "--json")
    plain = as_json(run(*args, "--spec-type", "none"))
    auto = as_json(run(*args, "--spec-draft-n-max", "auto"))
    assert auto["text"] == plain["text"]
    summary = auto["auto"]
    assert summary["rounds"] == auto["timings"]["rounds"] + auto["timings"]["plain_steps"]
    assert sum(summary["chosen_k"].values()) == summary["rounds"]
    assert any(int(k) > 0 for k in summary["chosen_k"])  # it probed drafting at least once


def test_kv_cache_types_reach_llama_cpp(tiny_target, tiny_draft):
    """-ctk/-ctv (and the draft's -ctkd/-ctvd) set the KV cache type: an f32 cache holds the
    same tokens in more bytes than f16 (llama_state_get_size). (The tiny models' 16-wide heads
    cannot hold quantized blocks of 32, so q8_0 is not usable on them.)"""
    import llama_cpp as ll

    from specgguf.core.sampling import SamplerParams
    from specgguf.loading.session import LoadOptions, Session, SpecOptions

    sizes, texts = {}, {}
    for kv in ("f16", "f32"):
        load = LoadOptions(
            model=tiny_target, model_draft=tiny_draft, n_ctx=256, threads=1, flash_attn="on",
            cache_type_k=kv, cache_type_v=kv, cache_type_k_draft=kv, cache_type_v_draft=kv,
        )  # fmt: skip
        s = Session(load, SpecOptions(types=["draft-simple"]))
        try:
            dec = s.decoder(SamplerParams(temp=0), 24, 0)
            texts[kv] = [t for r in dec.generate(s.tokenize("the cat sat on")) for t in r.emitted]
            sizes[kv] = (
                ll.llama_state_get_size(s.target.ptr),
                ll.llama_state_get_size(s.draft_ctx.ptr),
            )
        finally:
            s.close()
    assert sizes["f32"][0] > sizes["f16"][0] and sizes["f32"][1] > sizes["f16"][1]
    assert len(texts["f32"]) == len(texts["f16"]) == 24


def test_bad_kv_cache_type_is_refused_before_loading(run):
    code, out, err = run("-p", "x", "-ctkd", "q3_k")
    assert code == 1 and out == ""
    assert err.strip().splitlines() == [
        "error: invalid value for -ctkd: 'q3_k' "
        "(one of: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1)"
    ]


# -- llama-cli's interactive flags: -st, -r, -sysf, -e ------------------------------------------


@pytest.mark.parametrize("flags", [("-cnv", "-st"), ("-st",), ("-st", "--in-prefix", "U: ")])
def test_single_turn_answers_once(run, monkeypatch, flags):
    """-st alone is llama-cli's one-turn conversation; --in-prefix has no effect on a
    conversation's turns (as in llama-completion) and says so."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"hi\nnever answered\n")))
    code, _, err = run(*flags, "-n", "4", "--temp", "0")
    assert code == 0 and len(re.findall(r"^\[4 tokens", err, re.M)) == 1
    assert ("--in-prefix has no effect with -cnv" in err) == ("--in-prefix" in flags)


def test_reverse_prompt_stops_the_answer(run):
    ref = as_json(run("-p", "the cat sat on", "-n", "24", "--temp", "0", "--json"))["text"]
    word = ref.strip().split()[len(ref.split()) // 2] if ref.split() else ref[:3]
    cut = as_json(run("-p", "the cat sat on", "-n", "24", "--temp", "0", "--json", "-r", word))
    assert ref.startswith(cut["text"]) and word not in cut["text"] and len(cut["text"]) < len(ref)


def test_system_prompt_file_is_the_system_message(run, tmp_path):
    sysf = tmp_path / "sys.txt"
    sysf.write_text("S\n")
    args = ("-p", "hi", "-n", "4", "--temp", "0", "--json", "--chat")
    assert as_json(run(*args, "-sysf", sysf))["text"] == as_json(run(*args, "-sys", "S"))["text"]


def test_escape_turns_backslash_n_into_a_new_line(run):
    args = ("-n", "4", "--temp", "0", "--json")
    escaped, plain = as_json(run("-e", "-p", "a\\nb", *args)), as_json(run("-p", "a\nb", *args))
    assert (escaped["text"], escaped["tokens_evaluated"]) == (
        plain["text"], plain["tokens_evaluated"])


def test_sampler_flags_take_effect_and_speculation_keeps_them(run):
    """The penalties change the greedy text; the draft model's speculation and plain decoding
    print the same text with them, and with XTC seeded (each verify row sees its drafted
    prefix)."""
    base = ["-p", "hello hello hello", "-n", "24", "--temp", "0", "--json", "--no-chat"]
    plain = as_json(run(*base, "--spec-type", "none"))["text"]
    pen = ["--repeat-penalty", "1.8", "--presence-penalty", "1.0", "--repeat-last-n", "-1"]
    penalised = as_json(run(*base, *pen, "--spec-type", "none"))["text"]
    assert penalised != plain
    assert as_json(run(*base, *pen, "--spec-draft-n-max", "4"))["text"] == penalised
    seeded = ["-s", "7", "--temp", "0.9", "--xtc-probability", "0.5", "--mirostat", "0"]
    alone = as_json(run(*base, *pen, *seeded, "--spec-type", "none"))["text"]
    # one-hot drafts: token for token plain decoding's with the same seed
    one_hot = ["--spec-draft-n-max", "4", "--spec-draft-sampling", "greedy"]
    assert as_json(run(*base, *pen, *seeded, *one_hot))["text"] == alone


#: an answer that thinks first, held to that shape by a grammar (the tiny model never would)
THINKS = 'root ::= "<think>" [a-z ]{1,12} "</think>" [a-z]{1,8}'


def test_conversation_prints_thinking_apart_or_hides_it(run, monkeypatch):
    def turn(*flags):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"hi\n")))
        code, out, _ = run("-cnv", "-n", "40", "--temp", "0", "--grammar", THINKS, *flags)
        assert code == 0
        return out

    raw = turn("--reasoning-format", "none")
    m = re.fullmatch(r"<think>([a-z ]{1,12})</think>([a-z]{1,8})\n", raw)
    assert m, raw
    thinking, answer = m.group(1).strip(), m.group(2)
    apart = turn()
    assert apart == f"[thinking]\n{thinking}\n[end of thinking]\n{answer}\n", apart
    assert turn("--hide-reasoning") == f"{answer}\n"
    code, _, err = run("-p", "hi", "--hide-reasoning")
    assert code == ExitCode.USAGE and "add -cnv" in err


def test_print_token_count_at_each_multiple(run):
    """-ptc N: a line each time the context's tokens reach a multiple of N (a round that
    accepts several tokens prints once, with the count after it)."""
    code, _, err = run("-p", "the cat sat", "-n", "16", "--temp", "0", "--ignore-eos", "-ptc", "4")
    counts = [int(n) for n in re.findall(r"^tokens consumed so far = (\d+) / \d+$", err, re.M)]
    assert code == 0 and len(counts) >= 3, err
    buckets = [n // 4 for n in counts]
    assert buckets == sorted(set(buckets))  # each line crossed a new multiple
    code, _, err = run("-p", "the cat sat", "-n", "8", "--temp", "0")
    assert "tokens consumed" not in err


def test_token_count_lines() -> None:
    from specgguf.io.token_count import TokenCount

    out = io.StringIO()
    count = TokenCount(4, 100, 3, out=out)
    for n in (1, 3, 5, 1):
        count.add(n)
    assert out.getvalue() == ("tokens consumed so far = 4 / 100\n"
                              "tokens consumed so far = 12 / 100\n")
    never = TokenCount(0, 100, out=out)
    never.add(50)
    assert out.getvalue().count("\n") == 2


def _cache_file_tokens(path) -> int:
    import json as _json

    raw = path.read_bytes()
    n = int.from_bytes(raw[24:32], "little")
    return _json.loads(raw[32:32 + n])["n_tokens"]


def test_prompt_cache_file_reuses_the_prompt_exactly(run, tmp_path, tiny_draft):
    """--prompt-cache: the first run writes the evaluated prompt; the next one with the same
    start evaluates only the rest and says the same; -ro never writes; -all keeps the answer;
    a file of another model is one line."""
    cache = tmp_path / "p.cache"
    prompt = "the cat sat on the mat and then the dog came in to see"
    args = ("-p", prompt, "-n", "8", "--temp", "0", "--json", "--prompt-cache", cache)
    first = as_json(run(*args))
    assert cache.is_file() and _cache_file_tokens(cache) == first["tokens_evaluated"]
    second = as_json(run(*args))
    assert second["text"] == first["text"]
    assert second["tokens_evaluated"] < first["tokens_evaluated"], (first, second)
    written = cache.read_bytes()
    longer = as_json(run("-p", prompt + " the garden", "-n", "4", "--temp", "0", "--json",
                         "--prompt-cache", cache, "--prompt-cache-ro"))  # fmt: skip
    assert longer["tokens_evaluated"] < first["tokens_evaluated"] + 3
    assert cache.read_bytes() == written  # read only
    run(*args, "--prompt-cache-all")
    assert _cache_file_tokens(cache) > first["tokens_evaluated"]  # the answer too
    code, _, err = run(*args, model=tiny_draft, draft=False)
    assert code == 1 and "made with another model" in err and err.count("\n") == 1
    for bad in (("-cnv",), ("--prompt-cache-ro",)):
        drop = ("--prompt-cache", cache) if bad == ("--prompt-cache-ro",) else ()
        kept = [a for a in args if a not in drop]
        assert run(*kept, *bad)[0] == 1
