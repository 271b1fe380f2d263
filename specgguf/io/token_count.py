"""-ptc/--print-token-count N: a line on stderr each time the tokens in the context (the
prompt's and those generated) reach a multiple of N, as llama-completion prints it. A round
that accepts several tokens crosses a multiple at most once per multiple: the line gives the
count after the round."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TextIO


@dataclass
class TokenCount:
    every: int  # N; 0 or less: never
    n_ctx: int
    n_past: int = 0  # the tokens in the context so far
    out: TextIO | None = None  # default: stderr at the time of writing

    def add(self, n: int) -> None:
        """`n` more tokens are in the context."""
        before, self.n_past = self.n_past, self.n_past + n
        if self.every > 0 and self.n_past // self.every > before // self.every:
            print(f"tokens consumed so far = {self.n_past} / {self.n_ctx}",
                  file=self.out or sys.stderr)  # fmt: skip
