"""Escape-aware lookups (specgguf.drafters.text_views): the JSON spelling of a prompt and back,
and an n-gram drafter that copies a file from the prompt into a JSON string (and out of one).

A character-level "tokenizer" stands in for the target's here, so a token is a character and
what a drafter proposes can be read as text; the session's views over a real tokenizer are
checked on a tiny model at the end."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specgguf.drafters.registry import SPEC_TYPES, BuildContext
from specgguf.drafters.text_views import (
    MAX_VIEW_FACTOR,
    MAX_VIEW_SOURCE,
    TextViews,
    WithTextViews,
    escaped_view,
    json_escape,
    json_unescape,
    single_quoted_view,
    unescaped_view,
)

FILE = (
    'def mean(xs):\n    """The mean of xs."""\n    return sum(xs) / len(xs)\n\tpath = "C:\\\\tmp"\n'
)


def chars(text: str) -> list[int]:
    return [ord(c) for c in text]


def text(tokens) -> str:
    return "".join(chr(t) for t in tokens)


CHAR_VIEWS = TextViews(chars, text)


@given(st.text())
def test_escape_then_unescape_is_the_identity(s):
    assert json_unescape(json_escape(s)) == s
    # the body of the string json writes, quotes stripped, and it parses back
    assert json.loads('"' + json_escape(s) + '"') == s


def test_escapes_are_the_ones_json_writes():
    assert json_escape('a"b\\c\nd\te/é') == 'a\\"b\\\\c\\nd\\te/é'
    assert json_unescape(r"x\u00e9\/\"\\\n") == 'xé/"\\\n'
    # a lone surrogate escape stays spelled out (no unencodable character in a view)
    assert json_unescape(r"\ud83d!") == r"\ud83d!"
    # an escape split across two tokens is still one escape once the text is joined
    assert json_unescape(text(chars("a\\") + chars("nb"))) == "a\nb"


def test_escapes_before_a_word_are_tokens_of_their_own():
    pieces: list[str] = []
    views = TextViews(lambda t: pieces.append(t) or chars(t), text)
    written = "a:\\n    if x\\ndef f\\\\n"
    assert views.tokenize_as_written(written) == chars(written)
    # cut after an escape that a word follows, nowhere else (an escaped backslash is one)
    assert pieces == ["a:\\n    if x\\n", "def f\\\\", "n"]


def test_views_only_where_they_differ():
    assert escaped_view("plain words") is None
    assert escaped_view(FILE) == json_escape(FILE)
    assert unescaped_view(FILE) is None or unescaped_view(FILE) != FILE
    assert unescaped_view("no escapes here") is None
    assert unescaped_view(json_escape(FILE)) == FILE


def test_views_cover_the_prompts_tail_once_per_prompt():
    asked: list[str] = []
    views = TextViews(lambda t: asked.append(t) or chars(t), text)
    prompt = chars("x" * (MAX_VIEW_SOURCE + 100) + '"a"\n"b"\n')
    first = views(prompt)
    assert len(first["escaped"]) <= MAX_VIEW_FACTOR * MAX_VIEW_SOURCE
    assert text(first["escaped"]).endswith(json_escape('"a"\n"b"\n'))
    n = len(asked)
    assert views(list(prompt)) is first and len(asked) == n  # the next drafter: kept
    assert views(prompt[:-1]) is not first  # another prompt: made anew


def test_views_are_bounded_by_the_prompt():
    prompt = chars('"' * 100)  # escaping doubles it: within the bound
    views = CHAR_VIEWS(prompt)
    assert sum(map(len, views.values())) <= MAX_VIEW_FACTOR * len(prompt)
    assert CHAR_VIEWS([]) == {"raw": [], "escaped": []}


def map_k_with_views(size_n: int = 8, size_m: int = 24) -> WithTextViews:
    row = SPEC_TYPES["ngram-map-k"]
    ctx = BuildContext(ngram={"size_n": size_n, "size_m": size_m, "min_hits": 1}, views=CHAR_VIEWS)
    d = row.build(ctx)
    assert isinstance(d, WithTextViews)
    return d


def test_a_file_in_the_prompt_is_copied_into_a_json_string():
    prompt = "Fix this file:\n" + FILE + "Call write_file."
    d = map_k_with_views()
    d.begin(chars(prompt))
    # the model has started the arguments and is inside the content string
    written = '{"path": "stats.py", "content": "' + json_escape(FILE[:20])
    d.observe(chars(written))
    draft = text(d.propose(24).tokens)
    assert draft and json_escape(FILE).startswith(json_escape(FILE[:20]) + draft)
    assert "\\n" in draft or '\\"' in draft  # it copied escaped text, not the raw file


def test_without_views_the_same_lookup_finds_nothing():
    plain = SPEC_TYPES["ngram-map-k"].build(BuildContext(ngram={"size_n": 8, "size_m": 24}))
    prompt = "Fix this file:\n" + FILE + "Call write_file."
    plain.begin(chars(prompt))
    plain.observe(chars('{"content": "' + json_escape(FILE[:20])))
    assert plain.propose(24).tokens == []


def test_an_escaped_tool_result_is_copied_out_as_plain_text():
    result = json.dumps({"content": FILE})  # a read_file tool's answer, escaped
    d = map_k_with_views()
    d.begin(chars("Tool result: " + result + "\nWrite the file in a code block.\n"))
    d.observe(chars("```python\n" + FILE[:20]))
    draft = text(d.propose(24).tokens)
    assert draft and FILE.startswith(FILE[:20] + draft)


def test_the_registry_marks_both_the_wrapper_and_the_drafters():
    d = map_k_with_views()
    assert d.name == d.inner.name == d.escaped.name == "ngram-map-k"
    assert d.free and d.inner.free and d.escaped.free
    assert d.max_draft == d.inner.max_draft == 24


def test_a_line_without_anything_to_escape_is_continued_in_the_outputs_spelling():
    # ` / 2` ends a line in the raw file and in its escaped view alike: the raw prompt, read
    # last, would continue it with a raw newline even inside a JSON string
    prompt = chars(
        "Fix:\ndef half(ordered, mid):\n    return (ordered[mid - 1] + ordered[mid]) / 2\n"
        "\n\ndef f():\n    pass\nCall write_file."
    )
    d = map_k_with_views()
    d.begin(prompt)
    start = json_escape("def half(ordered, mid):\n    return (ordered[mid - 1]")
    d.observe(chars('{"content": "' + start))
    assert d.mode == "escaped"
    assert text(d.propose(24).tokens).startswith(" + ordered[mid]) / 2\\n\\n")
    # and in a code block, the raw spelling
    d.begin(prompt)
    d.observe(chars("```python\ndef half(ordered, mid):\n    return (ordered[mid - 1]"))
    assert d.mode == "raw"
    assert text(d.propose(24).tokens).startswith(" + ordered[mid]) / 2\n\n")


def test_an_escaped_newline_split_between_two_rounds_is_one():
    d = map_k_with_views()
    d.begin(chars("x = 1\n"))
    d.observe(chars("```\nx = 1\n"))
    assert d.mode == "raw"
    d.observe(chars('{"content": "x = 1\\'))  # the backslash ends this round
    d.observe(chars("ny = 2"))  # and its n starts the next
    assert d.mode == "escaped"


def test_ngram_cache_reads_no_views():
    # its -lcd file keeps what was generated; a made-up spelling must not be saved there
    assert not SPEC_TYPES["ngram-cache"].reads_views
    built = SPEC_TYPES["ngram-cache"].build(BuildContext(views=CHAR_VIEWS))
    assert not isinstance(built, WithTextViews)


@pytest.mark.parametrize("spec_type", ["ngram-simple", "ngram-map-k4v", "ngram-mod"])
def test_every_context_lookup_reads_the_views(spec_type):
    assert SPEC_TYPES[spec_type].reads_views
    built = SPEC_TYPES[spec_type].build(BuildContext(views=CHAR_VIEWS))
    assert isinstance(built, WithTextViews)


def test_the_session_views_use_the_targets_tokenizer(tiny_target):
    from specgguf.loading.session import LoadOptions, Session, SpecOptions

    session = Session(LoadOptions(model=tiny_target, n_ctx=512), SpecOptions(types=["ngram-map-k"]))
    try:
        tm = session.target_model
        source = "print(\"a\")\nx = 'b'\n"
        prompt = tm.tokenize("<|im_start|>" + source)
        views = session.text_views(prompt)
        # the chat marker is no text of the views; each view is spelled in the target's tokens
        spelled = b"".join(tm.piece(t) for t in views["escaped"]).decode()
        assert spelled == single_quoted_view(source) + escaped_view(source)
        assert views["raw"] == []  # the prompt holds no JSON escapes to decode
        assert session.text_views.tokenize("\\ndef") == tm.tokenize(
            "\\ndef", add_special=False, parse_special=False
        )
        drafter = session.decoder(
            session_sampler(), 8, 1, spec=SpecOptions(types=["ngram-map-k"])
        ).drafters[0]
        assert isinstance(drafter, WithTextViews)
        off = session.decoder(
            session_sampler(), 8, 1, spec=SpecOptions(types=["ngram-simple"], text_views=False)
        ).drafters[0]
        assert not isinstance(off, WithTextViews)
    finally:
        session.close()


def session_sampler():
    from specgguf.core.sampling import SamplerParams

    return SamplerParams(temp=0.0)
