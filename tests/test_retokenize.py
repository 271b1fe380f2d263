"""The translation functions of cross-vocabulary drafting, without a model: boundaries, merges
across them, characters split across tokens, special tokens, tokenizers that add text."""

from __future__ import annotations

import pytest

from specgguf.drafters.retokenize import (
    TextTokens,
    complete_utf8_len,
    decode_complete,
    split_after,
    starts_on_char,
    translate,
    window_start,
)


class Greedy:
    """A toy tokenizer: longest match over a vocabulary of byte strings (every single byte is
    a token, so any text round-trips), special tokens parsed from their text. Longest match
    makes merges across any boundary, which is what the window has to cope with."""

    SPECIAL = {b"<|im_end|>": 1000, b"<|im_start|>": 1001}

    def __init__(self, words: list[bytes]) -> None:
        self.ids: dict[bytes, int] = {bytes([b]): b for b in range(256)}
        for i, w in enumerate(words):
            self.ids[w] = 256 + i
        self.ids.update(self.SPECIAL)
        self.rev = {v: k for k, v in self.ids.items()}
        self.longest = max(len(w) for w in self.ids)
        self.calls: list[str] = []

    def tokenize(self, text: str) -> list[int]:
        self.calls.append(text)
        data = text.encode("utf-8")
        out, i = [], 0
        while i < len(data):
            for n in range(min(self.longest, len(data) - i), 0, -1):
                t = self.ids.get(data[i : i + n])
                if t is not None:
                    out.append(t)
                    i += n
                    break
        return out

    def piece(self, t: int) -> bytes:
        return self.rev[t]

    def spell(self, tokens: list[int]) -> bytes:
        return b"".join(self.piece(t) for t in tokens)


TARGET = Greedy([b"the", b" the", b"he", b" c", b"cat", b"at", b"ab", b"\xc3\xa9", b" \xc3"])


def test_complete_utf8_len_cuts_only_an_incomplete_last_character():
    assert complete_utf8_len(b"abc") == 3
    assert complete_utf8_len("é".encode()) == 2
    assert complete_utf8_len(b"a\xc3") == 1
    euro = "€".encode()  # 3 bytes
    assert complete_utf8_len(b"x" + euro[:1]) == 1
    assert complete_utf8_len(b"x" + euro[:2]) == 1
    assert complete_utf8_len(b"x" + euro) == 4
    emoji = "🙂".encode()  # 4 bytes
    assert complete_utf8_len(emoji[:3]) == 0
    assert complete_utf8_len(emoji) == 4
    assert complete_utf8_len(b"") == 0
    assert decode_complete(b"caf\xc3") == "caf"
    assert decode_complete(b"\xff\xfeab") is None  # not UTF-8 at all
    assert starts_on_char(b"a") and starts_on_char(b"\xc3\xa9") and not starts_on_char(b"\xa9")


def test_window_start_never_begins_inside_a_character():
    pieces = [b"a", b"b", b" \xc3", b"\xa9", b"c", b"d"]
    assert window_start(pieces, 2) == 4
    assert window_start(pieces, 3) == 2  # b"\xa9" continues a character: start one earlier
    assert window_start([b"\xa9"] * 3, 2, extend=0) == -1
    assert window_start([], 4) == 0


def test_split_after_finds_the_boundary_or_reports_a_crossing_merge():
    toks = TARGET.tokenize("the cat")
    assert TARGET.spell(toks) == b"the cat"
    assert split_after(toks, TARGET.piece, 3) == 1  # "the" | " c" "at"
    assert split_after(toks, TARGET.piece, 4) is None  # inside " c"
    assert split_after(toks, TARGET.piece, 7) == len(toks)


def test_translate_keeps_the_tokens_after_the_window_and_drops_the_open_last_one():
    tr = translate([b"the"], b" cat at", TARGET.tokenize, TARGET.piece)
    assert TARGET.spell(tr.all_tokens) == b" cat at"
    # " c", "at", " ", "at": the last could still grow ("at" + "e"...): not proposed
    assert TARGET.spell(tr.tokens) == b" cat "
    assert tr.covered == len(b" cat ")
    final = translate([b"the"], b" cat at", TARGET.tokenize, TARGET.piece, final=True)
    assert TARGET.spell(final.tokens) == b" cat at"
    assert not tr.crossed


def test_translate_with_a_merge_across_the_boundary_tokenizes_the_new_text_alone():
    # window "a" + draft "bat": longest match would re-spell the committed "a" as part of "ab"
    tr = translate([b"a"], b"bat x", TARGET.tokenize, TARGET.piece, final=True)
    assert tr.crossed
    assert TARGET.spell(tr.tokens) == b"bat x"
    assert tr.tokens[0] == TARGET.ids[b"b"]  # the committed "a" stays; "b" starts anew


def test_translate_without_the_window_would_differ():
    """The window matters: " the" after "x" is one token when the space is in the new text,
    and the tokens are exactly what tokenizing the whole text gives after the boundary."""
    whole = TARGET.tokenize("x the cat!")
    tr = translate([b"x"], b" the cat!", TARGET.tokenize, TARGET.piece, final=True)
    assert tr.tokens == whole[1:]


def test_translate_handles_a_character_split_across_the_boundary():
    # the target already emitted " \xc3" (half of " é"); the draft's text completes it
    window = [b"caf", b" \xc3"]
    tr = translate(window, b"\xa9 the cat", TARGET.tokenize, TARGET.piece, final=True)
    assert TARGET.spell(tr.tokens) == b"\xa9 the cat"
    # a draft text that itself ends inside a character: the incomplete tail is not translated
    tr = translate([b"the"], b" cat\xc3", TARGET.tokenize, TARGET.piece, final=True)
    assert TARGET.spell(tr.all_tokens) == b" cat"
    assert tr.covered <= len(b" cat")


def test_translate_refuses_text_that_is_not_utf8():
    tr = translate([b"the"], b"\xff\xfe", TARGET.tokenize, TARGET.piece)
    assert tr.dead and not tr.tokens


def test_translate_maps_chat_markers_to_special_tokens():
    tr = translate([b"hi"], b"!<|im_end|>", TARGET.tokenize, TARGET.piece, final=True)
    assert tr.tokens == [ord("!"), 1000]


def test_translate_keeps_only_tokens_that_spell_the_draft_text():
    """A tokenizer that adds text (a SentencePiece space prefix) must not put it in a draft."""

    def prefixing(text: str) -> list[int]:
        return TARGET.tokenize(" " + text)

    tr = translate([], b"cat at", prefixing, TARGET.piece, final=True)
    assert tr.tokens == []  # " c" does not spell "c": nothing proposed rather than a wrong token


def test_text_tokens_follow_appended_text_like_a_full_tokenization():
    draft = Greedy([b"th", b"the", b"e ", b"ca", b"at", b"t c"])
    tt = TextTokens(draft.tokenize, draft.piece, window=3)
    prompt = b"the ca"
    tt.reset([7777] + draft.tokenize(prompt.decode()), prompt, lead=1)  # 7777: a BOS
    draft.rev[7777] = b"<s>"
    for chunk in (b"t", b" ", b"th", b"e cat", b" at"):
        tt.append(chunk)
        assert tt.tokens[0] == 7777  # the BOS is never re-tokenized away
        assert draft.spell(tt.tokens[1:]) == bytes(tt.text)
    # with a window of 3 tokens the result equals tokenizing everything at once here
    assert tt.tokens[1:] == draft.tokenize(bytes(tt.text).decode())


def test_text_tokens_cost_does_not_grow_with_the_text():
    draft = Greedy([b"ab"])
    tt = TextTokens(draft.tokenize, draft.piece, window=4)
    tt.reset([], b"")
    for _ in range(500):
        tt.append(b"xy ")
    assert max(len(c) for c in draft.calls) < 40  # only a window plus the new bytes


def test_text_tokens_keep_an_incomplete_character_pending():
    draft = Greedy([b"\xc3\xa9", b" \xc3"])
    tt = TextTokens(draft.tokenize, draft.piece)
    tt.reset(draft.tokenize("caf"), b"caf")
    tt.append(b" \xc3")
    assert tt.pending == b"\xc3"  # half a character: not handed to the tokenizer
    assert draft.spell(tt.tokens) == b"caf "
    tt.append(b"\xa9!")
    assert tt.pending == b""
    assert draft.spell(tt.tokens) == "caf é!".encode()
    # the window re-spelled the space together with the completed character, as a full
    # tokenization would
    assert tt.tokens == draft.tokenize("caf é!")


@pytest.mark.parametrize("text", ["plain ascii text", "naïve café – 🙂 done", "a\n\n\tb"])
def test_translating_piece_by_piece_reassembles_the_text(text):
    """Drafting in small steps and translating each step never loses or invents bytes."""
    data = text.encode()
    window: list[bytes] = [b"start"]
    got = b""
    i = 0
    while i < len(data):
        step = data[i : i + 3]
        tr = translate(window, step, TARGET.tokenize, TARGET.piece, final=True)
        spelled = TARGET.spell(tr.tokens)
        assert step.startswith(spelled)
        if not spelled:  # a step that ends inside a character: take one more byte
            step = data[i : i + 4]
            tr = translate(window, step, TARGET.tokenize, TARGET.piece, final=True)
            spelled = TARGET.spell(tr.tokens)
        got += spelled
        window = [*window, *(TARGET.piece(t) for t in tr.tokens)][-4:]
        i += len(spelled) or 1
    assert got == data or got == data[: len(got)]
