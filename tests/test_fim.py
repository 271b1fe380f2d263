"""Fill-in-the-middle without a model: the prompt layout (specgguf.io.fim), an editor's stops
(specgguf.io.edit_stops) and llama.cpp's infill sampling stage (specgguf.core.sampling)."""

from __future__ import annotations

import numpy as np
import pytest

from specgguf.core.sampling import InfillStage, SamplerParams, distribution
from specgguf.io.edit_stops import EditStops
from specgguf.io.fim import CHUNK_SEPARATOR, Budget, ExtraChunk, FimTokens, infill_prompt

PRE, SUF, MID, REP, SEP, BOS = -1, -2, -3, -4, -5, -6
REPO_FIM = FimTokens(PRE, SUF, MID, REP, SEP)
WIDE = Budget(n_batch=4096, n_predict=-1, n_ctx=1 << 20)


def chars(text: str) -> list[int]:
    """A tokenizer of one token per character (its code point)."""
    return [ord(c) for c in text]


def text_of(tokens: list[int]) -> str:
    names = {PRE: "<PRE>", SUF: "<SUF>", MID: "<MID>", REP: "<REP>", SEP: "<SEP>", BOS: "<BOS>"}
    return "".join(names.get(t) or chr(t) for t in tokens)


def test_repository_layout_with_extra_files() -> None:
    extra = (ExtraChunk("a.py", "A=1\n"), ExtraChunk("b.py", "B=2\n"))
    out = infill_prompt(REPO_FIM, chars, "def f(", "):\n", extra=extra, prompt=chars("x"),
                        budget=WIDE)  # fmt: skip
    assert text_of(out) == (
        "<REP>myproject\n<SEP>a.py\nA=1\n<SEP>b.py\nB=2\n<SEP>filename\n"
        "<PRE>def f(x<SUF>):\n<MID>"
    )


def test_without_file_tokens_chunks_follow_a_text_separator() -> None:
    fim = FimTokens(PRE, SUF, MID, bos=BOS)
    out = infill_prompt(fim, chars, "p", "s", extra=(ExtraChunk("a", "T"),), budget=WIDE)
    assert text_of(out) == f"{CHUNK_SEPARATOR}T<BOS><PRE>p<SUF>s<MID>"


def test_spm_puts_the_suffix_first() -> None:
    out = infill_prompt(FimTokens(PRE, SUF, MID), chars, "p", "s", budget=WIDE, spm=True)
    assert text_of(out) == "<SUF>s<PRE>p<MID>"


def test_budget_keeps_the_prefix_tail_the_suffix_head_and_the_extra_tail() -> None:
    # a batch of 16: 12 prefix tokens; 16/4 - 2 - 1 (the prompt) = 1 suffix token
    budget = Budget(n_batch=16, n_predict=2, n_ctx=16 + 4 + 3)  # 3 extra tokens
    fim = FimTokens(PRE, SUF, MID)
    out = infill_prompt(fim, chars, "0123456789abcdefgh", "STUV",
                        extra=(ExtraChunk("f", "wxyz"),), prompt=chars("!"),
                        budget=budget)  # fmt: skip
    assert text_of(out) == "xyz<PRE>6789abcdefgh!<SUF>S<MID>"


def test_a_model_without_fim_tokens_is_refused() -> None:
    fim = FimTokens(None, SUF, None)
    assert fim.missing() == ["prefix", "middle"]
    with pytest.raises(ValueError, match="prefix, middle"):
        infill_prompt(fim, chars, "a", "b", budget=WIDE)


# -- n_indent and t_max_predict_ms ------------------------------------------------------------


def test_n_indent_ends_before_a_line_that_leaves_the_block() -> None:
    stops = EditStops(n_indent=4)
    assert stops.cut("x = 1\n    y = 2\n") == (len("x = 1\n    y = 2\n"), False)
    assert stops.cut("\n  ") == (3, False)  # a blank line, then an indentation in progress
    assert stops.cut("z") == (0, True)  # two columns: the line left the block


def test_t_max_predict_ms_ends_at_the_next_line_break_once_late() -> None:
    now = [0.0]
    stops = EditStops(t_max_predict_ms=100, clock=lambda: now[0])
    assert stops.cut("a\n") == (2, False)
    now[0] = 0.2
    assert stops.cut("bc") == (2, False)  # late, but no line break yet
    assert stops.cut("d\ne") == (3, True)
    assert not EditStops().active


# -- the infill sampling stage ------------------------------------------------------------------

PIECES = {0: b"re", 1: b"return", 2: b"x", 3: b"", 4: b"y", 5: b"z", 6: b"w", 7: b"v"}
EOG = 3


def stage() -> InfillStage:
    return InfillStage(PIECES.__getitem__, lambda t: t == EOG, end=EOG)


def test_infill_stage_merges_prefixes_and_drops_unlikely_text() -> None:
    ids = np.array([1, 0, 2, 4, 3])
    d = stage().apply(ids, np.array([0.4, 0.3, 0.15, 0.14, 0.01]))
    # "re" starts "return": their mass goes to the likelier one; x and y fall under 0.2;
    # the end token stays
    assert list(d.ids) == [1, 3]
    assert d.probs == pytest.approx([0.7 / 0.71, 0.01 / 0.71])


def test_infill_stage_ends_when_the_end_is_likely_enough() -> None:
    d = stage().apply(np.array([2, 4, 3]), np.array([0.5, 0.4, 0.1]))  # 3*0.1*3 > 0.9
    assert list(d.ids) == [3]


def test_infill_stage_ends_when_no_text_token_is_left() -> None:
    d = stage().apply(np.array([2, 4, 5, 6, 7, 3]), np.array([0.19] * 5 + [0.05]))
    assert list(d.ids) == [3] and d.probs[0] == 1.0


def test_infill_stage_is_the_last_stage_of_the_chain() -> None:
    logits = np.log(np.array([0.3, 0.4, 0.15, 0.01, 0.14]))
    plain = distribution(logits, SamplerParams(temp=1.0, top_k=5, top_p=1.0, min_p=0.0))
    d = distribution(logits, SamplerParams(temp=1.0, top_k=5, top_p=1.0, min_p=0.0,
                                           infill=stage()))  # fmt: skip
    assert plain.ids.size == 5 and list(d.ids) == [1, 3]


# -- speculation reads what is after the cursor -------------------------------------------------


@pytest.mark.parametrize(
    ("where", "text"),
    [("suffix", "    return total\n"), ("extra", "def mean(xs):\n    return sum(xs) / n\n")],
)
def test_the_default_lookup_drafts_from_the_suffix_and_the_extra_files(where, text) -> None:
    """A completion often writes again what follows the cursor or what another file holds:
    both are in the FIM prompt, so the n-gram lookup (the default ngram-map-k) drafts their
    continuation once the output starts repeating them."""
    from specgguf.drafters.ngram_map import NgramMapK

    extra = (ExtraChunk("stats.py", text),) if where == "extra" else ()
    suffix = text if where == "suffix" else "\n"
    prompt = infill_prompt(REPO_FIM, chars, "def total(xs):\n", suffix, extra=extra, budget=WIDE)
    d = NgramMapK(3, 8)
    d.begin(prompt)
    written = chars(text)
    d.observe(written[:6])
    assert list(d.propose(8).tokens) == written[6:14]
