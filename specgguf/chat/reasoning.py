"""Reasoning apart from the answer: a thinking model's `<think>...</think>` (DeepSeek R1, QwQ,
Qwen3, Qwen3.5) goes to `reasoning_content`, the rest to `content`, whole or as it streams.

Most families mark it `<think>...</think>`; a family with other markers (Gemma 4's
`<|channel>thought ... <channel|>`, Command R7B's `<|START_THINKING|> ... <|END_THINKING|>`)
gives them as `markers`. Thinking is recognised where the answer begins: the answer opens with
`<think>`, or the
prompt already opened it (R1's and Qwen3.5's templates end the prompt with `<think>\\n`), so
everything up to `</think>` is thinking. A `<think>` later in the answer is content, and
anything inside the thinking is thinking: a tool call written there is no call (the caller
feeds only the content to the call parser). An answer cut short inside its thinking has only
reasoning. The formats are llama-server's: `none` leaves the text as it is, `deepseek` (and
`auto`, the default) splits it.

Pure: no model, no llama_cpp."""

from __future__ import annotations

from specgguf.chat.markers import partial_marker

OPEN, CLOSE = "<think>", "</think>"
THINK = (OPEN, CLOSE)  # most families' markers
REASONING_FORMATS = ("none", "deepseek", "auto")
REASONING, CONTENT = "reasoning", "content"

# the splitter's states: before the answer's first non-blank text; thinking; answering
_START, _THINK, _ANSWER = range(3)


class Pieces:
    """What every splitter shares: text fed in, (REASONING or CONTENT, text) pieces out, each
    kind's text so far. A splitter's `_step(out, final)` releases what it can of `_buf`, and
    `_rest(out)` what is left at the end."""

    def __init__(self) -> None:
        self._buf = ""
        self.reasoning = ""  # all the thinking so far
        self.content = ""  # all the content so far

    def feed(self, text: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        self._buf += text
        self._step(out, final=False)
        return out

    def close(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        self._step(out, final=True)
        self._rest(out)
        return out

    def _step(self, out: list[tuple[str, str]], final: bool) -> None:
        raise NotImplementedError

    def _rest(self, out: list[tuple[str, str]]) -> None:
        raise NotImplementedError

    def _emit(self, out: list[tuple[str, str]], kind: str, text: str) -> None:
        if not text:
            return
        if kind == REASONING:
            self.reasoning += text
        else:
            self.content += text
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))


class ReasoningSplit(Pieces):
    """Feed the generated text; get (REASONING or CONTENT, text) pieces in order."""

    def __init__(self, *, opened: bool = False, markers: tuple[str, str] = THINK) -> None:
        """`opened`: the prompt ended inside an opened <think>; `markers`: the family's."""
        super().__init__()
        self._open, self._close = markers
        self._state = _THINK if opened else _START
        self._after_close = False  # blanks right after </think> are not content
        self._lead = opened  # newlines right after <think> are not thinking

    def _rest(self, out: list[tuple[str, str]]) -> None:
        if self._buf:
            self._emit(out, REASONING if self._state == _THINK else CONTENT, self._buf)
            self._buf = ""

    def _step(self, out: list[tuple[str, str]], final: bool) -> None:
        while self._buf:
            s = self._buf
            if self._state == _START:
                head = s.lstrip()
                if head.startswith(self._open):
                    self._buf, self._state, self._lead = head[len(self._open) :], _THINK, True
                elif not final and (not head or self._open.startswith(head)):
                    return  # the answer may still open with <think>
                else:
                    self._state = _ANSWER
            elif self._state == _THINK:
                if self._lead:  # the newlines right after <think> are not thinking
                    s = s.lstrip("\n")
                    if not s:
                        self._buf = ""
                        return
                    self._buf, self._lead = s, False
                i = s.find(self._close)
                if i < 0:
                    keep = 0 if final else partial_marker(s, self._close)
                    self._emit(out, REASONING, s[: len(s) - keep])
                    self._buf = s[len(s) - keep :]
                    return
                self._emit(out, REASONING, s[:i])
                self._buf, self._state, self._after_close = s[i + len(self._close) :], _ANSWER, True
            else:
                if self._after_close:
                    s = s.lstrip()
                    if not s:
                        self._buf = ""
                        return
                    self._after_close = False
                self._emit(out, CONTENT, s)
                self._buf = ""

def prompt_opens_thinking(prompt: str, open_: str = OPEN) -> bool:
    """Whether the rendered prompt ends inside an opened <think> (the template opened it)."""
    tail = prompt.rstrip()
    return tail.endswith(open_)


def split_reasoning(
    text: str, *, opened: bool = False, markers: tuple[str, str] = THINK
) -> tuple[str, str]:
    """A whole answer -> (reasoning, content)."""
    s = ReasoningSplit(opened=opened, markers=markers)
    s.feed(text)
    s.close()
    return s.reasoning.rstrip(), s.content

