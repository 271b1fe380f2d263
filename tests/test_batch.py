"""Batch mode: JSONL parsing and validation, the driver (order, bad lines, exit status), and
`specgguf run --jsonl` end to end on the tiny models."""

from __future__ import annotations

import io
import json

import pytest
from specgguf_cli.app import run_cli

from specgguf.errors import ExitCode, PromptError, SpecggufError
from specgguf.io.batch import BatchCounts, BatchLineError, parse_line, run_batch

# -- parsing ----------------------------------------------------------------------------------


def test_parse_prompt_with_overrides():
    item = parse_line(
        '{"prompt": "p", "id": "x", "n_predict": 4, "temperature": 0, "top_k": 5, '
        '"top_p": 0.5, "min_p": 0.1, "seed": 9}',
        3,
    )
    assert (item.line, item.id, item.prompt, item.messages) == (3, "x", "p", None)
    assert item.overrides() == {
        "n_predict": 4,
        "temperature": 0.0,
        "top_k": 5,
        "top_p": 0.5,
        "min_p": 0.1,
        "seed": 9,
    }


def test_parse_messages_and_bytes_with_bom():
    raw = '\ufeff{"messages": [{"role": "user", "content": "é"}], "id": 7}'.encode()
    item = parse_line(raw, 1)
    assert item.messages == [{"role": "user", "content": "é"}]
    assert item.id == 7 and item.overrides() == {}


@pytest.mark.parametrize(
    "line, match",
    [
        ("{nope", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ("{}", 'exactly one of "prompt" or "messages"'),
        ('{"prompt": "a", "messages": []}', "exactly one of"),
        ('{"prompt": 3}', '"prompt" must be a string'),
        ('{"messages": "hi"}', "must be a list"),
        ('{"messages": [{"role": "user"}]}', '"content" must be a string'),
        ('{"prompt": "a", "temp": 1}', "unknown field 'temp'"),
        ('{"prompt": "a", "n_predict": -2}', '"n_predict" must be an integer in -1..2147483647'),
        ('{"prompt": "a", "n_predict": 1.5}', '"n_predict" must be'),
        ('{"prompt": "a", "n_predict": true}', '"n_predict" must be'),
        ('{"prompt": "a", "temperature": -1}', '"temperature" must be a number >= 0'),
        ('{"prompt": "a", "temperature": "hot"}', '"temperature" must be'),
        ('{"prompt": "a", "top_p": 1.5}', r'"top_p" must be a number in \[0, 1\]'),
        ('{"prompt": "a", "min_p": -0.1}', '"min_p" must be'),
        ('{"prompt": "a", "top_k": 2.0}', '"top_k" must be an integer'),
        ('{"prompt": "a", "seed": 4294967296}', '"seed" must be'),
        ('{"prompt": "a", "id": [1]}', '"id" must be a string or an integer'),
    ],
)
def test_parse_rejects(line, match):
    with pytest.raises(BatchLineError, match=match) as e:
        parse_line(line, 1)
    assert e.value.code == ExitCode.PROMPT


def test_parse_rejects_bad_utf8():
    with pytest.raises(BatchLineError, match="not valid UTF-8"):
        parse_line(b'{"prompt": "\xff"}', 1)


def test_error_keeps_id_when_known():
    with pytest.raises(BatchLineError) as e:
        parse_line('{"prompt": "a", "id": "k", "top_p": 2}', 1)
    assert e.value.item_id == "k"


# -- the driver -------------------------------------------------------------------------------


def fake_answer(item):
    if item.prompt == "boom":
        raise PromptError("the prompt is 9999 tokens, the context is 512 (-c)")
    if item.prompt == "bug":
        raise RuntimeError("oops")
    return {"text": item.prompt.upper(), "stop_reason": "limit", **item.overrides()}


def drive(lines):
    out = io.StringIO()
    counts = BatchCounts()
    code = run_batch(lines, fake_answer, out, counts=counts)
    return code, [json.loads(x) for x in out.getvalue().splitlines()], counts


def test_order_and_success_exit():
    lines = [json.dumps({"prompt": p, "id": i}) for i, p in enumerate("abcde")]
    code, objs, counts = drive(lines)
    assert code == ExitCode.OK
    assert [o["text"] for o in objs] == list("ABCDE")
    assert [o["id"] for o in objs] == list(range(5))
    assert [o["line"] for o in objs] == [1, 2, 3, 4, 5]
    assert (counts.lines, counts.answered, counts.failed) == (5, 5, 0)


def test_bad_lines_in_the_middle_do_not_stop_the_batch():
    lines = [
        '{"prompt": "a", "id": "first"}',
        "not json",
        "",
        '{"prompt": "boom", "id": "long"}',
        '{"prompt": "bug"}',
        '{"prompt": "z", "n_predict": 2, "id": "last"}',
    ]
    code, objs, counts = drive(lines)
    assert code == ExitCode.BATCH_PARTIAL == 8
    assert [o["line"] for o in objs] == [1, 2, 4, 5, 6]  # the blank line is skipped
    assert objs[0]["text"] == "A"
    assert objs[1]["error"]["type"] == "prompt" and objs[1]["id"] is None
    assert objs[2] == {
        "id": "long",
        "line": 4,
        "error": {
            "type": "prompt",
            "code": 5,
            "message": "the prompt is 9999 tokens, the context is 512 (-c)",
        },
    }
    assert objs[3]["error"]["type"] == "internal" and "oops" in objs[3]["error"]["message"]
    assert objs[4] == {"id": "last", "line": 6, "text": "Z", "stop_reason": "limit", "n_predict": 2}
    assert (counts.lines, counts.answered, counts.failed) == (5, 2, 3)


def test_all_lines_failing_is_still_partial_and_empty_input_is_ok():
    assert drive(["x", "y"])[0] == ExitCode.BATCH_PARTIAL
    assert drive([])[0] == ExitCode.OK
    assert drive(["", "  \n"])[1] == []


def test_interrupted_answer_stops_the_batch():
    def answer(item):
        if item.prompt == "b":
            return {"text": "partial", "stop_reason": "interrupted"}
        return {"text": item.prompt, "stop_reason": "limit"}

    out = io.StringIO()
    lines = ['{"prompt": "a"}', '{"prompt": "b"}', '{"prompt": "c"}']
    assert run_batch(lines, answer, out) == ExitCode.INTERRUPTED
    assert [json.loads(x)["text"] for x in out.getvalue().splitlines()] == ["a", "partial"]

    def ctrl_c(item):
        raise KeyboardInterrupt

    out = io.StringIO()
    assert run_batch(lines, ctrl_c, out) == ExitCode.INTERRUPTED
    (obj,) = [json.loads(x) for x in out.getvalue().splitlines()]
    assert obj["error"]["type"] == "interrupted"


def test_output_is_flushed_per_line():
    class Recorder(io.StringIO):
        flushes = 0

        def flush(self):
            Recorder.flushes += 1

    out = Recorder()
    run_batch(['{"prompt": "a"}', "bad", '{"prompt": "b"}'], fake_answer, out)
    assert Recorder.flushes >= 3


def test_lines_are_read_lazily():
    seen = []

    def lines():
        for i in range(3):
            seen.append(i)
            yield json.dumps({"prompt": str(i)})

    def answer(item):
        assert seen[-1] == int(item.prompt)  # the next line was not read before answering
        return {"text": item.prompt}

    assert run_batch(lines(), answer, io.StringIO()) == ExitCode.OK


# -- end to end on the tiny models ------------------------------------------------------------

FAST = ["-t", "1", "-c", "512", "-fa", "off"]


def cli_jsonl(tiny_target, tiny_draft, monkeypatch, capsys, payload: str, *extra):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(payload.encode())))
    argv = ["run", "-m", str(tiny_target), "-md", str(tiny_draft), *FAST, "--jsonl"]
    code = run_cli([*argv, *extra])
    captured = capsys.readouterr()
    return code, [json.loads(x) for x in captured.out.splitlines()], captured.err


def single_json(tiny_target, tiny_draft, capsys, *extra):
    argv = ["run", "-m", str(tiny_target), "-md", str(tiny_draft), *FAST, "--json", "-q"]
    assert run_cli([*argv, *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_jsonl_order_overrides_and_error_line(tiny_target, tiny_draft, monkeypatch, capsys):
    long_prompt = "the cat " * 400  # > 512 tokens
    payload = "\n".join(
        [
            json.dumps({"prompt": "the cat sat on", "id": "a"}),
            json.dumps({"prompt": "Once upon a time", "id": "b", "n_predict": 5, "seed": 3}),
            "{broken",
            json.dumps({"prompt": long_prompt, "id": "long"}),
            json.dumps({"messages": [{"role": "user", "content": "hi"}], "id": "c"}),
            json.dumps({"prompt": "def main():", "id": "d", "temperature": 0.9, "seed": 11}),
        ]
    )
    code, objs, err = cli_jsonl(
        tiny_target, tiny_draft, monkeypatch, capsys, payload, "-n", "12", "--temp", "0"
    )
    assert code == ExitCode.BATCH_PARTIAL
    assert [o["id"] for o in objs] == ["a", "b", None, "long", "c", "d"]
    assert [o["line"] for o in objs] == [1, 2, 3, 4, 5, 6]
    assert "error" in objs[2] and objs[2]["error"]["message"].startswith("not JSON")
    assert objs[3]["error"]["code"] == ExitCode.PROMPT
    assert "context is 512" in objs[3]["error"]["message"]
    ok = [objs[i] for i in (0, 1, 4, 5)]
    for o in ok:
        assert set(o) >= {"text", "stop_reason", "tokens_predicted", "timings", "seed"}
        assert o["timings"]["predicted_n"] == o["tokens_predicted"]
    assert [o["tokens_predicted"] for o in ok] == [12, 5, 12, 12]
    assert objs[1]["seed"] == 3 and objs[5]["seed"] == 11
    assert "batch: 6 lines, 4 answered, 2 failed" in err

    # each answer is what a single run with the same settings gives
    assert (
        objs[0]["text"]
        == single_json(
            tiny_target, tiny_draft, capsys, "-p", "the cat sat on", "-n", "12", "--temp", "0"
        )["text"]
    )
    assert (
        objs[1]["text"]
        == single_json(
            tiny_target, tiny_draft, capsys, "-p", "Once upon a time", "-n", "5", "--temp", "0"
        )["text"]
    )
    sampled = single_json(
        tiny_target, tiny_draft, capsys, "-p", "def main():", "-n", "12", "--temp", "0.9",
        "-s", "11",
    )  # fmt: skip
    assert objs[5]["text"] == sampled["text"]
    # messages lines go through the GGUF's template
    rendered = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    chat = single_json(tiny_target, tiny_draft, capsys, "-p", rendered, "-n", "12", "--temp", "0")
    assert objs[4]["text"] == chat["text"]
    assert objs[4]["tokens_evaluated"] == chat["tokens_evaluated"]


def test_jsonl_all_good_exits_zero_and_reads_file(tiny_target, tiny_draft, tmp_path, capsys):
    f = tmp_path / "in.jsonl"
    f.write_text("".join(json.dumps({"prompt": f"p{i}", "id": i}) + "\n" for i in range(4)))
    argv = ["run", "-m", str(tiny_target), "-md", str(tiny_draft), *FAST]
    code = run_cli([*argv, "--jsonl", "-f", str(f), "-n", "3", "--temp", "0", "-q"])
    captured = capsys.readouterr()
    assert code == 0
    objs = [json.loads(x) for x in captured.out.splitlines()]
    assert [o["id"] for o in objs] == [0, 1, 2, 3]
    assert captured.err == ""


def test_jsonl_chat_mode_wraps_prompt_lines(tiny_target, tiny_draft, monkeypatch, capsys):
    payload = json.dumps({"prompt": "hi"}) + "\n"
    _, (obj,), _ = cli_jsonl(
        tiny_target, tiny_draft, monkeypatch, capsys, payload, "-n", "6", "--temp", "0", "--chat"
    )
    rendered = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    ref = single_json(tiny_target, tiny_draft, capsys, "-p", rendered, "-n", "6", "--temp", "0")
    assert obj["text"] == ref["text"] and obj["tokens_evaluated"] == ref["tokens_evaluated"]


def test_jsonl_usage_errors(tiny_target, capsys, tmp_path):
    base = ["run", "-m", str(tiny_target), *FAST, "--jsonl"]
    assert run_cli([*base, "-p", "x"]) == ExitCode.USAGE
    assert run_cli([*base, "-cnv"]) == ExitCode.USAGE
    assert run_cli([*base, "-f", str(tmp_path / "missing.jsonl")]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "not -p" in err and "cannot be combined" in err and "no such file" in err


def test_batch_line_error_is_a_specgguf_error():
    assert issubclass(BatchLineError, SpecggufError)


def test_jsonl_prompt_lines_are_plain_text_with_the_default_pair(
    tiny_target, tiny_draft, monkeypatch, capsys
):
    from pathlib import Path

    monkeypatch.setattr(
        "specgguf.modelfiles.models.require_default_pair",
        lambda: (Path(tiny_target), Path(tiny_draft)),
    )
    payload = (
        json.dumps({"prompt": "hi"})
        + "\n"
        + json.dumps({"messages": [{"role": "user", "content": "hi"}]})
    )
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(payload.encode())))
    assert run_cli(["run", *FAST, "--jsonl", "-n", "4", "--temp", "0", "-q"]) == 0
    plain, chat = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert plain["tokens_evaluated"] == 2  # "hi", not wrapped
    rendered = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    ref = single_json(tiny_target, tiny_draft, capsys, "-p", rendered, "-n", "4", "--temp", "0")
    assert chat["tokens_evaluated"] == ref["tokens_evaluated"]


def test_jsonl_content_parts(tiny_target, tiny_draft, monkeypatch, capsys):
    """OpenAI's list-of-parts content: text parts are answered exactly as the joined string;
    an image part is that line's error, the batch goes on."""
    parts = [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}]
    image = [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]
    payload = "\n".join(
        json.dumps({"messages": [{"role": "user", "content": c}], "id": i})
        for i, c in (("parts", parts), ("joined", "hi\nthere"), ("image", image))
    )
    code, objs, _ = cli_jsonl(
        tiny_target, tiny_draft, monkeypatch, capsys, payload, "-n", "8", "--temp", "0"
    )
    assert code == ExitCode.BATCH_PARTIAL
    assert objs[0]["text"] == objs[1]["text"] and objs[0]["tokens_predicted"] == 8
    # the same prompt: the second line reuses the first one's KV prefix (same total tokens)
    assert objs[0]["tokens_evaluated"] == (
        objs[1]["tokens_evaluated"] + objs[1]["timings"]["cache_n"]
    )
    assert objs[2]["error"]["code"] == ExitCode.PROMPT
    assert '"image_url" is not supported' in objs[2]["error"]["message"]


def test_a_line_takes_every_sampler_field_of_a_request():
    from specgguf.io.batch import parse_line

    item = parse_line('{"prompt": "x", "repeat_penalty": 1.2, "logit_bias": {"5": -1}}', 1)
    assert item.sampling == {"penalty_repeat": 1.2, "logit_bias": ((5, -1.0),)}
    with pytest.raises(Exception, match="'repeat_penalty' must be a number > 0"):
        parse_line('{"prompt": "x", "repeat_penalty": 0}', 1)
