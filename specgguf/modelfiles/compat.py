"""Can this draft model speculate for that target? llama.cpp's answer, before loading either.

`check_compatible` is `common_speculative_are_compatible` (common/speculative.cpp) on the
VocabInfo that gguf_info reads: the verdict is the same, so a pair `check` accepts is a pair
llama.cpp accepts. Where llama.cpp stops at the first failed clause, the report keeps going
and lists every clause that fails, in llama.cpp's order, so the first reason is the one
llama.cpp would have hit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specgguf.errors import IncompatibleModelsError
from specgguf.modelfiles.gguf_info import VocabInfo, vocab_type

__all__ = [
    "CHECK_START_TOKEN_ID",
    "MAX_VOCAB_SIZE_DIFFERENCE",
    "CompatReport",
    "check_compatible",
    "require_compatible",
    "vocab_type",
]

MAX_VOCAB_SIZE_DIFFERENCE = 128  # SPEC_VOCAB_MAX_SIZE_DIFFERENCE
CHECK_START_TOKEN_ID = 5  # SPEC_VOCAB_CHECK_START_TOKEN_ID: ids below are special tokens
MAX_DIFFS_SHOWN = 5
_PREFIX = "the target and draft vocabs are not compatible: "


@dataclass
class CompatReport:
    """The verdict, one human line per failed clause, and the first differing token texts
    as (id, target_text, draft_text), made printable (undecodable bytes as \\x escapes)."""

    ok: bool
    reasons: list[str] = field(default_factory=list)
    first_diffs: list[tuple[int, str, str]] = field(default_factory=list)
    n_vocab_target: int = 0
    n_vocab_draft: int = 0
    n_token_diffs: int = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "reasons": list(self.reasons),
            "first_diffs": [{"id": i, "target": t, "draft": d} for i, t, d in self.first_diffs],
            "n_vocab_target": self.n_vocab_target,
            "n_vocab_draft": self.n_vocab_draft,
            "n_token_diffs": self.n_token_diffs,
        }


def _printable(text: str) -> str:
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _special(kind: str, add: bool, tid: int | None) -> str:
    if not add:
        return f"does not add {kind}"
    return f"adds {kind} {tid if tid is not None else '(none)'}"


def _special_reason(kind: str, t_add: bool, t_id: int | None, d_add: bool, d_id: int | None):
    """Clauses 2 and 3: the add flags must agree, and when added, so must the ids."""
    if t_add != d_add or (t_add and t_id != d_id):
        return (
            f"{kind} tokens differ: the target {_special(kind, t_add, t_id)}, "
            f"the draft {_special(kind, d_add, d_id)}"
        )
    return None


def check_compatible(target: VocabInfo, draft: VocabInfo) -> CompatReport:
    """llama.cpp's five clauses: vocab type; add_bos and BOS id; add_eos and EOS id;
    sizes within 128; token texts equal for ids 5 .. min(n_vocab)-1."""
    reasons: list[str] = []
    t_type, d_type = vocab_type(target.model), vocab_type(draft.model)
    if t_type != d_type:
        reasons.append(
            f"vocab types differ: the target is {t_type} ({target.model}), "
            f"the draft is {d_type} ({draft.model})"
        )
    for kind, args in (
        ("BOS", (target.add_bos, target.bos_id, draft.add_bos, draft.bos_id)),
        ("EOS", (target.add_eos, target.eos_id, draft.add_eos, draft.eos_id)),
    ):
        reason = _special_reason(kind, *args)
        if reason:
            reasons.append(reason)
    n_t, n_d = target.n_vocab, draft.n_vocab
    if abs(n_t - n_d) > MAX_VOCAB_SIZE_DIFFERENCE:
        reasons.append(
            f"vocab sizes differ by {abs(n_t - n_d)} tokens: the target has {n_t}, "
            f"the draft {n_d} (at most {MAX_VOCAB_SIZE_DIFFERENCE} allowed)"
        )
    # llama.cpp compares token texts only when the sizes are close; the report compares
    # them anyway, so a user sees how far apart two vocabs really are
    diffs, n_diffs = _token_diffs(target.tokens, draft.tokens, min(n_t, n_d))
    if n_diffs:
        i, t_text, d_text = diffs[0]
        reasons.append(
            f"{n_diffs} token texts differ in ids {CHECK_START_TOKEN_ID}..{min(n_t, n_d) - 1}, "
            f"the first at id {i}: the target has {t_text!r}, the draft {d_text!r}"
        )
    return CompatReport(not reasons, reasons, diffs, n_t, n_d, n_diffs)


def _token_diffs(target: tuple[str, ...], draft: tuple[str, ...], n: int):
    """The first MAX_DIFFS_SHOWN differing ids in [5, n) and the total count. A vocab-less
    model ("no_vocab") has no texts: llama.cpp holds empty dummy tokens there, and so do we."""
    start = CHECK_START_TOKEN_ID
    if n <= start:
        return [], 0
    if len(target) >= n and len(draft) >= n and target[start:n] == draft[start:n]:
        return [], 0  # the common case, at C speed
    diffs: list[tuple[int, str, str]] = []
    count = 0
    for i in range(start, n):
        t_text = target[i] if i < len(target) else ""
        d_text = draft[i] if i < len(draft) else ""
        if t_text != d_text:
            count += 1
            if len(diffs) < MAX_DIFFS_SHOWN:
                diffs.append((i, _printable(t_text), _printable(d_text)))
    return diffs, count


def require_compatible(target: VocabInfo, draft: VocabInfo) -> CompatReport:
    """Raise IncompatibleModelsError with llama.cpp's message and the first reason."""
    report = check_compatible(target, draft)
    if not report.ok:
        raise IncompatibleModelsError(_PREFIX + report.reasons[0])
    return report
