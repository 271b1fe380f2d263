"""`specgguf run -i`: llama-completion's interactive mode, on plain text (no chat template).

The prompt is generated from; when the answer reaches a reverse prompt (-r), the end of text
or -n tokens, the user types what comes next, and generation goes on from there. The input is
wrapped as llama-completion wraps it: a BOS token first (--in-prefix-bos), --in-prefix before
it and --in-suffix after it (both printed; their special tokens are read as such, the user's
text never is). At the end of text with -r given, the first reverse prompt is put in first, as
llama-completion does. -if waits for the user before generating anything.

Speculation is the same as every run's: each turn's generation is a new call over the whole
sequence so far, and the decoder's prefill keeps what the KV caches hold of it, so a turn
evaluates only its new tokens (and whatever the text's tokenization no longer shares with
what was generated).

Input is read line by line as llama.cpp reads it: a line ending in \\ flips whether Enter goes
on to another line (--multiline-input starts with it on), a line ending in / hands control
back at once (the / becomes a newline); the last newline is dropped; an empty input hands
control back without adding anything; end of input (Ctrl-D) ends the run."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from specgguf import interrupts
from specgguf.io.output import write_stdout


@dataclass(frozen=True)
class InteractiveOptions:
    first: bool = False  # -if: the user speaks before anything is generated
    in_prefix: str = ""
    in_suffix: str = ""
    prefix_bos: bool = False
    multiline: bool = False
    escape: Callable[[str], str] | None = None  # -e: escapes in the user's input processed


def read_input(stream: IO[str], multiline: bool) -> str | None:
    """One input as llama.cpp's console reads it; None at the end of input."""
    buffer = ""
    while True:
        line = stream.readline()
        if not line:
            break
        line = line.rstrip("\r\n")
        more = multiline
        if line.endswith("/"):  # control goes back now
            buffer += line[:-1] + "\n"
            break
        if line.endswith("\\"):
            line, multiline = line[:-1], not multiline
            more = multiline
        buffer += line + "\n"
        if not more:
            break
    if not buffer:
        return None
    return buffer[:-1] if buffer.endswith("\n") else buffer


def turn_summary(s: Any, stop_reason: str) -> str:
    """The line on stderr after each turn of -cnv and -i (`s`: the turn's RunStats)."""
    from specgguf.core.stats import format_rate

    return (f"[{s.predicted_n} tokens, {format_rate(s.predicted_speed, 0, 1)}, prompt "
            f"{s.prompt_n} tokens ({s.cache_n} reused), accept {100 * s.accept_rate:.1f}% "
            f"({s.n_accept}/{s.n_drafted}), {stop_reason}]")  # fmt: skip


def run_interactive(run: Any, prompt: str, opts: InteractiveOptions,
                    stream: Callable[..., Any], *, color: bool) -> int:  # fmt: skip
    """The interactive loop over `run` (run_cmd._Run); `stream` writes a generation out
    (run_cmd.stream_generation). Exit status 0 at the end of input; 130 when Ctrl-C comes at
    the input (Ctrl-C during an answer stops that answer only)."""
    from specgguf.errors import PromptError

    gen = run.gen
    model = gen.session.target_model

    def special(text: str) -> list[int]:
        return gen.encode(text, add_special=False, parse_special=True) if text else []

    seq: list[int] = gen.encode(prompt, add_special=True, parse_special=True)
    if prompt:
        write_stdout(prompt)
    waiting = opts.first or not prompt
    while True:
        if waiting:
            if opts.prefix_bos:
                seq.append(model.bos)
            if opts.in_prefix:
                write_stdout(opts.in_prefix)
            try:
                text = read_input(sys.stdin, opts.multiline)
            except KeyboardInterrupt:
                write_stdout("\n")
                return interrupts.exit_code()
            if text is None:
                return 0
            if text:
                if opts.in_suffix:
                    write_stdout(opts.in_suffix)
                if opts.escape is not None:
                    text = opts.escape(text)
                seq += special(opts.in_prefix)
                seq += gen.encode(text, add_special=False, parse_special=False)
                seq += special(opts.in_suffix)
        if not seq:
            waiting = True
            continue
        try:
            gen.session.check_prompt_length(seq)
        except PromptError as e:
            raise PromptError(f"the interactive session no longer fits: {e}") from None
        generation = run.generate(seq)
        result = stream(generation, json_out=False, color=color, trace=run.tracer)
        seq = seq + gen.encode(result.text, add_special=False, parse_special=False)
        if result.stop_reason == "stop":  # a reverse prompt: shown and kept, as llama.cpp does
            write_stdout(generation.stopping_word)
            seq += special(generation.stopping_word)
        elif result.stop_reason == "eos" and run.stop:
            write_stdout(run.stop[0])
            seq += special(run.stop[0])
        if not run.quiet:
            print("\n" + turn_summary(generation.stats, result.stop_reason), file=sys.stderr)
        if result.stop_reason == "context":
            return 0
        if result.stop_reason == "interrupted":
            if interrupts.received() not in (None, signal.SIGINT):
                return interrupts.exit_code()
            interrupts.reset()
        waiting = True
