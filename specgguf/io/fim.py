"""Fill-in-the-middle prompts: the text before and after an editor's cursor laid out in a
model's FIM tokens, the way llama-server lays out an `/infill` request.

A code model trained for FIM completes the hole between a prefix and a suffix when it sees

    [extra context] [PRE] prefix prompt [SUF] suffix [MID]

(or, with `spm`, suffix first: [SUF] suffix [PRE] prefix prompt [MID]) and writes the middle
after [MID]. Models with the repository-level tokens (Qwen2.5-Coder: `<|repo_name|>`,
`<|file_sep|>`) take other files as extra context in front:

    [REP]myproject\\n [SEP]name0\\n text0 [SEP]name1\\n text1 ... [SEP]filename\\n [PRE] ...

without them, each extra chunk follows a plain-text separator line. The budget is llama-server's:
the prefix keeps its last 3/4 of a batch (`n_batch`), the suffix its first quarter of a batch
less the prompt and two tokens, and the extra context its last tokens that fit in the context
after a batch and twice the server's `n_predict`. The placeholders `myproject` and `filename`
are what llama-server writes (a model was trained with some name there; the real ones are not
sent by the plugins).

Pure: the tokenizer comes in as a function (text -> ids, no special tokens added or parsed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: what stands in the repository line and the current file's separator line
REPO_NAME = "myproject"
CURRENT_FILE = "filename"
#: an extra chunk's filename when the request gives none
DEFAULT_FILENAME = "tmp"
#: the line before each extra chunk when the model has no file-separator token
CHUNK_SEPARATOR = "\n\n--- snippet ---\n\n"
#: the roles a model must have a token for, and what a refusal calls each
REQUIRED = (("pre", "prefix"), ("suf", "suffix"), ("mid", "middle"))


@dataclass(frozen=True)
class FimTokens:
    """A model's FIM token ids by role (None: the model has none); `bos` is prepended when
    the model adds a BOS token to its prompts."""

    pre: int | None
    suf: int | None
    mid: int | None
    rep: int | None = None
    sep: int | None = None
    bos: int | None = None

    def missing(self) -> list[str]:
        """The names of the required tokens this model lacks (empty: it can infill)."""
        return [name for role, name in REQUIRED if getattr(self, role) is None]


@dataclass(frozen=True)
class ExtraChunk:
    """Another file's text given as context (`input_extra`'s {filename, text})."""

    filename: str
    text: str


@dataclass(frozen=True)
class Budget:
    """What bounds the layout: a batch (`n_batch`), the server's `n_predict` (-1: none) and
    a slot's context."""

    n_batch: int
    n_predict: int
    n_ctx: int

    @property
    def prefix(self) -> int:
        return 3 * (self.n_batch // 4)

    def suffix(self, n_prompt: int) -> int:
        return max(0, self.n_batch // 4 - (2 + n_prompt))

    @property
    def extra(self) -> int:
        return max(0, self.n_ctx - self.n_batch - 2 * self.n_predict)


Tokenize = Callable[[str], list[int]]


def extra_context(fim: FimTokens, tokenize: Tokenize, chunks: Sequence[ExtraChunk]) -> list[int]:
    """The extra chunks in the model's repository form (or with text separators), ending
    with the current file's separator line where the model has one."""
    out: list[int] = []
    if fim.rep is not None:
        out += [fim.rep, *tokenize(REPO_NAME + "\n")]
    for chunk in chunks:
        if fim.sep is not None:
            out += [fim.sep, *tokenize(chunk.filename + "\n")]
        else:
            out += tokenize(CHUNK_SEPARATOR)
        out += tokenize(chunk.text)
    if fim.sep is not None:
        out += [fim.sep, *tokenize(CURRENT_FILE + "\n")]
    return out


def infill_prompt(
    fim: FimTokens,
    tokenize: Tokenize,
    prefix: str,
    suffix: str,
    *,
    extra: Sequence[ExtraChunk] = (),
    prompt: Sequence[int] = (),
    budget: Budget,
    spm: bool = False,
) -> list[int]:
    """The whole FIM prompt in tokens: extra context, then prefix (its tail) and the
    `prompt` tokens, and suffix (its head), in PSM order (SPM with `spm`), ending in the
    middle token. ValueError when the model lacks a required FIM token."""
    missing = fim.missing()
    if missing:
        raise ValueError(f"the model has no FIM {', '.join(missing)} token")
    assert fim.pre is not None and fim.suf is not None and fim.mid is not None
    pre_tokens = tokenize(prefix)
    suf_tokens = tokenize(suffix)
    keep_pre = min(len(pre_tokens), budget.prefix)
    keep_suf = min(len(suf_tokens), budget.suffix(len(prompt)))
    head = [fim.pre, *pre_tokens[len(pre_tokens) - keep_pre :], *prompt]
    tail = [fim.suf, *suf_tokens[:keep_suf]]
    first, second = (tail, head) if spm else (head, tail)
    ctx = extra_context(fim, tokenize, extra)
    keep_extra = min(budget.extra, len(ctx))
    bos = [fim.bos] if fim.bos is not None else []
    return [*ctx[len(ctx) - keep_extra :], *bos, *first, *second, fim.mid]
