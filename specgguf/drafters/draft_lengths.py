"""The draft-length range, written once: what --spec-draft-n-max / --spec-draft-n-min accept
(the command line, bench's lists, a server request's `speculative.n_max` / `n_min`) and the
longest draft `--spec-draft-n-max auto` may choose.

Apart from the spec-type table because every layer reads these two numbers (the CLI's checks
and help, bench, the server's request parser, auto's policy), and none of them should need the
drafters to do so.
"""

from __future__ import annotations

#: --spec-draft-n-max and --spec-draft-n-min accept 0..N_MAX_LIMIT (0: no speculation)
N_MAX_LIMIT = 256

#: the longest draft `--spec-draft-n-max auto` may choose (specgguf.auto.policy's cap)
AUTO_N_MAX_CAP = 8

#: how a draft model's proposals are drawn (--spec-draft-sampling): its argmax, a sample of its
#: distribution (checked by rejection sampling), or auto (the session's rule: probabilistic
#: when sampling with a fixed draft length, greedy otherwise)
DRAFT_SAMPLING_MODES = ("greedy", "probabilistic", "auto")


def in_range(n: int) -> bool:
    """Whether `n` is a draft length the flags (and a request) accept."""
    return 0 <= n <= N_MAX_LIMIT
