"""Each round's draft of llama-speculative-simple beside specgguf's, for the parity scripts
(scripts/eagle3_parity.py, scripts/mtp_vs_llama.py).

Rounds are paired by how many tokens were emitted before them. llama-speculative-simple
drafts from the prompt's last token on, while specgguf's first token comes from the prompt's
own pass (its first --trace record, `from_prompt`, drafts nothing), so the two lists of rounds
are offset and some rounds of either have no partner; with the same greedy text, rounds with
the same count start from the same tokens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: llama.cpp's debug line for each draft step's best candidate, and its end-of-round line
CANDIDATE = re.compile(r"draft candidate\s+0, pos\s+(\d+):\s+(\d+)")
ROUND_END = re.compile(r"accepted (\d+)/(\d+) draft tokens")


def llama_drafts(log: str) -> dict[int, list[int]]:
    """Each round's draft by the tokens emitted before it, from llama-speculative-simple's
    debug log (`-v`)."""
    rounds: dict[int, list[int]] = {}
    current: list[int] = []
    emitted = 0
    for line in log.splitlines():
        if m := CANDIDATE.search(line):
            pos, tok = int(m.group(1)), int(m.group(2))
            if pos == len(current):
                current.append(tok)
        elif m := ROUND_END.search(line):
            rounds[emitted] = current
            emitted += int(m.group(1)) + 1
            current = []
    return rounds


def trace_drafts(records: list[dict[str, Any]]) -> dict[int, list[int]]:
    """Each drafting round's draft by the tokens emitted before it, from `specgguf run
    --trace` records."""
    rounds: dict[int, list[int]] = {}
    emitted = 0
    for rec in records:
        if not rec["from_prompt"]:
            rounds[emitted] = rec["proposed"]
        emitted += len(rec["emitted"])
    return rounds


@dataclass
class Parity:
    """The paired rounds (by tokens emitted before them), those whose drafts differ, and how
    many are identical. A shorter draft is compared as a prefix (-n cuts the budgets near the
    end), and the last paired round may have no draft on one side (no room left under -n)."""

    paired: list[int]
    differ: list[int]
    identical: int


def compare(theirs: dict[int, list[int]], ours: dict[int, list[int]]) -> Parity:
    paired = sorted(set(theirs) & set(ours))
    differ = []
    for i in paired:
        a, b = theirs[i], ours[i]
        m = min(len(a), len(b))
        one_empty = m == 0 and (a or b) and i != paired[-1]
        if a[:m] != b[:m] or one_empty:
            differ.append(i)
    return Parity(paired, differ, sum(theirs[i] == ours[i] for i in paired))


def report(header: str, theirs: dict[int, list[int]], records: list[dict[str, Any]]) -> int:
    """Print each paired round's two drafts under `header` and the verdict; the exit status
    (0: every paired round drafted the same tokens)."""
    ours = trace_drafts(records)
    p = compare(theirs, ours)
    print(f"{header}: {len(theirs)} llama.cpp rounds, {len(ours)} specgguf drafting rounds, "
          f"{len(p.paired)} paired")  # fmt: skip
    for i in p.paired:
        ok = i not in p.differ
        print(f"after {i:3d} tokens  llama.cpp {theirs[i]}  specgguf {ours[i]}  "
              f"{'equal' if ok else 'DIFFERENT'}")  # fmt: skip
    print(f"{len(p.paired) - len(p.differ)}/{len(p.paired)} rounds drafted the same tokens; "
          f"{sum(r['n_accepted'] for r in records)} draft tokens accepted")  # fmt: skip
    return 0 if p.paired and not p.differ else 1
