"""The two stops an editor asks of a completion (llama-server's `n_indent` and
`t_max_predict_ms`), over the text as it is generated.

An editor completes the code at the cursor and wants the block it is in, not the rest of the
file: with `n_indent` N, a line after the first that starts with less than N spaces or tabs
of indentation has left the block, so the completion ends right before that line's first
character (its indentation is kept, as llama-server keeps it). Blank lines never end it: a
block may hold empty lines. With `t_max_predict_ms` T, a completion that has been generating
for longer than T ms ends at the next line break it writes: the editor shows whole lines,
and a late suggestion is worth less than a short one.

Pure; O(new text) per call. The clock starts at the first text, after the prompt's pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class EditStops:
    """Feed each new piece of generated text to `cut`; it says how much of it to keep and
    whether the generation ends there."""

    def __init__(
        self,
        n_indent: int = 0,
        t_max_predict_ms: float = 0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.n_indent = n_indent
        self.limit_s = t_max_predict_ms / 1e3 if t_max_predict_ms > 0 else None
        self._clock = clock
        self._t0: float | None = None
        self._line_head = False  # after a line break, before the line's first other character
        self._indent = 0

    @property
    def active(self) -> bool:
        return self.n_indent > 0 or self.limit_s is not None

    def cut(self, new: str) -> tuple[int, bool]:
        """(characters of `new` to keep, whether to stop after them)."""
        if self._t0 is None:
            self._t0 = self._clock()
        if self.n_indent > 0:
            for i, ch in enumerate(new):
                if self._line_head:
                    if ch in " \t":
                        self._indent += 1
                        continue
                    self._line_head = False
                    if ch != "\n" and self._indent < self.n_indent:
                        return i, True
                if ch == "\n":
                    self._line_head = True
                    self._indent = 0
        late = self.limit_s is not None and self._clock() - self._t0 > self.limit_s
        return len(new), late and "\n" in new
