"""Token probabilities (specgguf.core.token_probs) as clients read them: OpenAI's chat
`logprobs.content`, OpenAI's legacy completions `logprobs`, and llama-server's
`completion_probabilities` (also `run --json --n-probs`).

A token's text is its bytes as UTF-8 with an incomplete character at the end left out (a
character split over two tokens shows in neither's `token`; `bytes` has every byte), as
llama-server writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from specgguf.core.token_probs import TokenProbs

#: the most alternatives a request may ask for per token (top_logprobs, logprobs, n_probs)
N_PROBS_MAX = 100
#: OpenAI's floor for a log probability (a token the row gives no mass: JSON has no -inf)
LOGPROB_FLOOR = -9999.0

Piece = Callable[[int], bytes]


def token_text(data: bytes) -> str:
    """The bytes as text, an incomplete UTF-8 character at the end left out."""
    for cut in range(min(3, len(data)) + 1):
        try:
            return data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", errors="replace")


def _logprob(value: float) -> float:
    return max(value, LOGPROB_FLOOR)


def _one(token: int, value: float, piece: Piece, key: str) -> dict[str, Any]:
    data = piece(token)
    number = value if key == "prob" else _logprob(value)
    return {"id": token, "token": token_text(data), "bytes": list(data), key: number}


def completion_probabilities(
    entries: Sequence[TokenProbs], piece: Piece, *, post_sampling: bool = False
) -> list[dict[str, Any]]:
    """llama-server's `completion_probabilities`: per token its id, text, bytes and
    `logprob` with `top_logprobs`, or (after the chain) `prob` with `top_probs`."""
    key, top_key = ("prob", "top_probs") if post_sampling else ("logprob", "top_logprobs")
    return [
        {
            **_one(e.token, e.value, piece, key),
            top_key: [_one(t, v, piece, key) for t, v in e.top],
        }
        for e in entries
    ]


def chat_logprobs(entries: Sequence[TokenProbs], piece: Piece) -> dict[str, Any]:
    """OpenAI's chat `logprobs`: {"content": [{token, logprob, bytes, top_logprobs}],
    "refusal": null} (each entry also with llama-server's `id`)."""
    return {"content": completion_probabilities(entries, piece), "refusal": None}


def legacy_logprobs(
    entries: Sequence[TokenProbs], piece: Piece, offset: int = 0
) -> dict[str, Any]:
    """OpenAI's legacy completions `logprobs`: parallel lists `tokens`, `token_logprobs`,
    `top_logprobs` (one {text: logprob} object per token) and `text_offset` (where each
    token's text starts in the generated text; `offset`: the characters before these)."""
    tokens, values, tops, offsets = [], [], [], []
    for e in entries:
        text = token_text(piece(e.token))
        tokens.append(text)
        values.append(_logprob(e.value))
        tops.append({token_text(piece(t)): _logprob(v) for t, v in e.top})
        offsets.append(offset)
        offset += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": values,
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def text_length(entries: Sequence[TokenProbs], piece: Piece) -> int:
    """Characters the tokens' texts take (a stream's next `text_offset`)."""
    return sum(len(token_text(piece(e.token))) for e in entries)
