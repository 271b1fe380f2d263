"""draft-simple across tokenizers: a draft model with another vocabulary drafts through text.

llama.cpp refuses a draft whose vocabulary differs from the target's. The two models still
share text, so this drafter (used by draft-simple when the vocabularies differ) works in
bytes:

- The draft sees the text the target sees. The prompt's target tokens are spelled out (chat
  markers included, as their text) and tokenized by the draft's tokenizer with special-token
  parsing, so "<|im_start|>" becomes the draft's own marker when it has one, plain text if not.
- It proposes up to K of its own tokens greedily; their bytes are appended to the sequence's
  bytes and re-tokenized with the target's tokenizer from a safe boundary (the last few
  target tokens' text, retokenize.translate). Target tokens the draft's text wholly
  covers, except a last one that more text could still re-spell, become a one-hot draft. The
  target verifies it with the usual lossless rule; nothing here can change the output.
- The draft's KV cache follows what was emitted: the emitted target tokens' bytes are
  appended and the tail re-tokenized for the draft (retokenize.TextTokens); the KV keeps the
  longest prefix that still matches (drafted tokens the target accepted stay), the rest is
  rolled back and fed on the next proposal.
- A draft end-of-generation token ends the draft; when its text is a single end-of-generation
  token of the target (ChatML's "<|im_end|>" in both), that token is proposed too.

Drafting is always one-hot (greedy): the draft's q is over another vocabulary and cannot be
used for rejection sampling, and one-hot drafts keep a seed's text equal to plain decoding.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from specgguf.core.context import KVContext, Outputs
from specgguf.core.draft import Draft, Drafter, DraftGate, DraftTiming
from specgguf.core.sampling import top_k_confidence
from specgguf.drafters.retokenize import (
    MAX_WINDOW_EXTEND,
    TARGET_WINDOW,
    TextTokens,
    Translation,
    translate,
    window_start,
)

#: the draft may take up to this many of its own tokens per target token asked for (its
#: vocabulary may be finer), plus one that only shows whether the last target token is whole
DRAFT_TOKENS_PER_TARGET = 2


class Vocabulary(Protocol):
    """What translating text between two tokenizers needs of a model (the engine's Model has it)."""

    bos: int
    add_bos: bool

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]: ...

    def piece_special(self, token: int) -> bytes: ...


class CrossVocabDrafter(Drafter):
    def __init__(
        self,
        ctx: KVContext,
        draft: Vocabulary,
        target: Vocabulary,
        *,
        n_max: int = 3,
        p_min: float = 0.0,
        n_min: int = 0,
        reuse_prefix: bool = True,
    ) -> None:
        self.ctx = ctx
        self.draft_model = draft
        self.target_model = target
        self.max_draft = n_max
        self.p_min = p_min
        self.n_min = n_min
        self.reuse_prefix = reuse_prefix
        self.timing: DraftTiming | None = None  # for auto's cost model, translation included
        #: what the last propose translated (--trace, stats): draft tokens, text, target tokens
        self.translation: dict[str, Any] | None = None
        self.text = TextTokens(self._draft_tokenize, self.draft_model.piece_special)
        # the last target pieces, enough for a re-tokenization window
        self._pieces: deque[bytes] = deque(maxlen=TARGET_WINDOW + MAX_WINDOW_EXTEND + 1)
        self.kv: list[int] = []  # draft tokens whose KV the draft context holds
        self._full = False  # the draft's context cannot hold the text: no more drafts
        self._sync_ms = 0.0  # re-tokenizing emitted text, charged to the next proposal

    # -- tokenizers -------------------------------------------------------------------------

    def _draft_tokenize(self, text: str) -> list[int]:
        return self.draft_model.tokenize(text, add_special=False, parse_special=True)

    def _target_tokenize(self, text: str) -> list[int]:
        return self.target_model.tokenize(text, add_special=False, parse_special=True)

    def _target_piece(self, token: int) -> bytes:
        return self.target_model.piece_special(token)

    # -- the sequence -----------------------------------------------------------------------

    def begin(self, prompt: Sequence[int]) -> None:
        tm = self.target_model
        toks = list(prompt)
        if toks and tm.add_bos and toks[0] == tm.bos:
            toks = toks[1:]  # the target's own BOS is not text the draft should read
        data = b"".join(self._target_piece(t) for t in toks)
        self._pieces.clear()
        self._pieces.extend(self._target_piece(t) for t in toks[-self._pieces.maxlen :])
        dm = self.draft_model
        lead = [dm.bos] if dm.add_bos and dm.bos >= 0 else []
        body = self._draft_tokenize(data.decode("utf-8", "replace"))
        self.text.reset(lead + body, data, lead=len(lead))
        hist = self.text.tokens
        # the draft shares the target's context size but may need more tokens for the same
        # text: past its end it stops drafting instead of failing the run
        self._full = len(hist) >= self.ctx.n_ctx
        if self._full:
            self.ctx.truncate(0)
            self.kv = []
            return
        keep = self.ctx.keep_prefix(hist[:-1] if self.reuse_prefix else [])
        self.ctx.truncate(keep)
        self.kv = list(hist[:keep])
        if len(hist) > 1:  # everything but the last token, as the target does
            self._catch_up(len(hist) - 1, outputs="none")
        self._sync_ms = 0.0

    @property
    def behind(self) -> int:
        return 0 if self._full else len(self.text.tokens) - len(self.kv)

    def observe(self, tokens: Sequence[int]) -> None:
        t0 = time.perf_counter()
        self.translation = None  # the loop has read it for this round
        if self._full:
            return
        data = b"".join(self._target_piece(t) for t in tokens)
        self._pieces.extend(self._target_piece(t) for t in tokens)
        first = self.text.append(data)
        hist = self.text.tokens
        # drafted tokens past `first` stay valid exactly as far as they match the new tail
        m = first
        while m < len(self.kv) and m < len(hist) and self.kv[m] == hist[m]:
            m += 1
        keep = min(m, max(0, len(hist) - 1))  # the last token stays pending: drafting starts there
        if keep < len(self.kv):
            del self.kv[keep:]
            self.ctx.truncate(keep)
        self._sync_ms += (time.perf_counter() - t0) * 1e3

    def _catch_up(self, upto: int, outputs: Outputs) -> np.ndarray | None:
        pending = self.text.tokens[len(self.kv) : upto]
        logits = self.ctx.decode(pending, len(self.kv), outputs=outputs)
        self.kv.extend(pending)
        return logits

    # -- drafting ---------------------------------------------------------------------------

    def _translate(self, window: list[bytes], text: bytes, final: bool) -> Translation | None:
        """Target tokens for the draft's text; None when the draft does not continue the
        sequence's pending bytes (an incomplete character the target already began)."""
        pend = self.text.pending
        if pend:
            if len(text) < len(pend):
                return Translation() if pend.startswith(text) else None
            if not text.startswith(pend):
                return None
            text = text[len(pend) :]
        return translate(window, text, self._target_tokenize, self._target_piece, final=final)

    def propose(self, budget: int, gate: DraftGate | None = None) -> Draft:
        self.translation = None
        hist = self.text.tokens
        room = self.ctx.n_ctx - len(hist)  # draft tokens that still fit after the text
        if budget <= 0 or not hist or self._full or room < 2:
            self._full = self._full or (bool(hist) and room < 2)
            return Draft()
        t0 = time.perf_counter()
        hist = self.text.tokens
        n_pending = len(hist) - len(self.kv)
        if n_pending <= 0:  # never happens (the last token is kept pending); be safe
            del self.kv[len(hist) - 1 :]
            self.ctx.truncate(len(hist) - 1)
            n_pending = 1
        logits = self._catch_up(len(hist), outputs="last")
        assert logits is not None
        timing = self.timing = DraftTiming(
            (time.perf_counter() - t0) * 1e3 + self._sync_ms, n_pending
        )
        translate_ms = self._sync_ms  # reported; the timing has it in catch_up_ms already
        self._sync_ms = 0.0
        step_translate_ms = 0.0
        pieces = list(self._pieces)
        ws = window_start(pieces, TARGET_WINDOW)
        window = pieces[ws:] if ws >= 0 else []
        cap = min(DRAFT_TOKENS_PER_TARGET * budget + 1, room - 1)
        dm = self.draft_model
        dtoks: list[int] = []
        text = bytearray()
        tr: Translation | None = Translation()
        tr_at = 0  # len(dtoks) when tr was computed
        eog: int | None = None
        while True:
            row = logits[0]
            if self.p_min > 0.0:
                tok, confidence = top_k_confidence(row)
                if confidence < self.p_min:
                    break
            else:
                tok = int(np.argmax(row))
            if dm.is_eog(tok):
                eog = tok
                break
            dtoks.append(tok)
            text += dm.piece_special(tok)
            if len(dtoks) >= cap:
                break
            if len(dtoks) >= budget:  # fewer draft tokens than budget rarely make budget targets
                t1 = time.perf_counter()
                tr = self._translate(window, bytes(text), final=False)
                tr_at = len(dtoks)
                step_translate_ms += (time.perf_counter() - t1) * 1e3
                if tr is None or tr.dead or len(tr.tokens) >= budget:
                    break
            t1 = time.perf_counter()
            logits = self.ctx.decode([tok], len(self.kv), outputs="last")
            timing.steps_ms += (time.perf_counter() - t1) * 1e3
            timing.steps += 1
            self.kv.append(tok)
        t1 = time.perf_counter()
        if dtoks and (eog is not None or tr_at != len(dtoks)):
            # the draft ended (EOS: its last target token is whole) or stopped untranslated
            tr = self._translate(window, bytes(text), final=eog is not None)
        tokens = list(tr.tokens) if tr is not None else []
        if eog is not None and tr is not None and len(tokens) == len(tr.all_tokens):
            end = self._target_tokenize(dm.piece_special(eog).decode("utf-8", "replace"))
            if len(end) == 1 and self.target_model.is_eog(end[0]):
                tokens.append(end[0])
        step_translate_ms += (time.perf_counter() - t1) * 1e3
        timing.steps_ms += step_translate_ms  # auto prices a proposal with its translation
        translate_ms += step_translate_ms
        tokens = tokens[:budget]
        if len(tokens) < self.n_min:
            tokens = []
        timing.proposed = len(tokens)
        self.translation = {
            "draft_tokens": dtoks + ([eog] if eog is not None else []),
            "draft_text": [dm.piece_special(t).decode("utf-8", "replace") for t in dtoks]
            + ([dm.piece_special(eog).decode("utf-8", "replace")] if eog is not None else []),
            "target_tokens": tokens,
            "translate_ms": translate_ms,
        }
        return Draft(tokens)

