"""The sampler settings that name text, made ready for one vocabulary before a sequence starts:
DRY's sequence breakers become token ids (core.dry.breakers_from_vocab), and a logit bias
given as text (llama-server's `[["Hello", -1]]` or `{"Hello": -1}`) biases every token of its
tokenization, each occurrence once, as llama-server does.

Pure: the vocabulary comes as callables (a token's text with control tokens spelled out, the
plain tokenizer), so the generator hands in its target model's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from specgguf.core.dry import DryBreakers, breakers_from_vocab
from specgguf.core.sampling import SamplerParams


class _Pieces(Sequence[bytes]):
    """Every token's text, read on demand."""

    def __init__(self, n_vocab: int, piece: Callable[[int], bytes]) -> None:
        self.n, self.piece = n_vocab, piece

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self.piece(j) for j in range(*i.indices(self.n))]
        if not 0 <= i < self.n:  # (iteration stops here: a token past the end would abort)
            raise IndexError(i)
        return self.piece(i)

    def __iter__(self):
        return (self.piece(i) for i in range(self.n))


class SamplerVocab:
    """One vocabulary's view of the sampler settings; DRY's breakers are looked up once per
    list of breakers (a scan of the whole vocabulary) and kept."""

    def __init__(
        self, n_vocab: int, piece: Callable[[int], bytes], tokenize: Callable[[str], list[int]]
    ) -> None:
        self.pieces = _Pieces(n_vocab, piece)
        self.tokenize = tokenize
        self._breakers: dict[tuple[str, ...], DryBreakers] = {}

    def ready(self, params: SamplerParams) -> SamplerParams:
        """`params` with its breakers and its text biases resolved (itself when none)."""
        changes: dict = {}
        if params.dries and params.dry_breakers is None:
            key = params.dry_sequence_breakers
            found = self._breakers.get(key)
            if found is None:
                found = self._breakers[key] = breakers_from_vocab(key, self.pieces, self.tokenize)
            changes["dry_breakers"] = found
        if any(isinstance(t, str) for t, _ in params.logit_bias):
            bias: list[tuple[int, float]] = []
            for t, b in params.logit_bias:
                if isinstance(t, str):
                    bias.extend((tok, b) for tok in self.tokenize(t))
                else:
                    bias.append((t, b))
            changes["logit_bias"] = tuple(bias)
        return replace(params, **changes) if changes else params
