"""`python -m tests.launch ARGS...`: the specgguf CLI with test hooks, for subprocess tests.

Tiny models load in milliseconds and pulls need the network, so a signal "during the load" or
"while pip downloads" cannot be aimed at in the real thing. These hooks stretch those moments
without changing what specgguf does in them:

* SPECGGUF_TEST_SLOW_LOG=SECONDS: every call of llama.cpp's log callback sleeps that long, and
  the first one made while a model loads writes LOAD_MARKER to stderr. A signal sent after the
  marker lands while llama.cpp is inside the Python callback: the case where Python's own
  handler raised into ctypes ("Exception ignored on calling ctypes callback") and went on.
* SPECGGUF_TEST_MARK_PREFILL=1: PREFILL_MARKER goes to stderr as prompt evaluation starts,
  SPECGGUF_TEST_MARK_RENDER=1: RENDER_MARKER as a chat template starts rendering.
* SPECGGUF_TEST_PIP='["cmd", ...]': `pull` runs this instead of `python -m pip`.
"""

from __future__ import annotations

import json
import os
import time

LOAD_MARKER = b"[tests.launch] inside llama.cpp's log callback, loading\n"
PREFILL_MARKER = b"[tests.launch] prompt evaluation starts\n"
RENDER_MARKER = b"[tests.launch] chat template rendering starts\n"


def _slow_log(delay: float) -> None:
    from specgguf import interrupts
    from specgguf.binding import engine

    original = engine._log
    announced = False

    def slow(level, text, user):
        nonlocal announced
        if not announced and b"llama_model_loader" in (text or b""):
            announced = True
            os.write(2, LOAD_MARKER)
        if not interrupts.pending():  # once the signal is in, time what specgguf does
            time.sleep(delay)
        return original(level, text, user)

    # it stands for specgguf's own callback (slowed down), so it is registered like it
    engine._log = interrupts.callback(slow)


def _mark_prefill() -> None:
    from specgguf.core.loop import SpeculativeDecoder

    original = SpeculativeDecoder.prefill

    def prefill(self, prompt):
        os.write(2, PREFILL_MARKER)
        return original(self, prompt)

    SpeculativeDecoder.prefill = prefill


def _mark_render() -> None:
    from specgguf.chat.template import ChatTemplate

    original = ChatTemplate.render

    def render(self, *args, **kw):
        os.write(2, RENDER_MARKER)
        return original(self, *args, **kw)

    ChatTemplate.render = render


def main() -> None:
    delay = os.environ.get("SPECGGUF_TEST_SLOW_LOG")
    if delay:
        _slow_log(float(delay))
    if os.environ.get("SPECGGUF_TEST_MARK_PREFILL"):
        _mark_prefill()
    if os.environ.get("SPECGGUF_TEST_MARK_RENDER"):
        _mark_render()
    pip = os.environ.get("SPECGGUF_TEST_PIP")
    if pip:
        from specgguf.modelfiles import models
        models.PIP_COMMAND = json.loads(pip)
    from specgguf_cli.app import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
