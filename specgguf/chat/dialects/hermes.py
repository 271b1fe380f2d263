"""Hermes 2 Pro / Qwen2.5 / Qwen3: each call a JSON object inside <tool_call> tags (also in a
code fence, or the bare object as the whole answer). Also the fallback for a template of no
known family: its tools are then described in a system message in these words."""

from specgguf.chat.dialects.base import Dialect, Forced
from specgguf.chat.tools import CLOSE, OPEN, ToolCallStream

DIALECT = Dialect(
    name="hermes",
    family="Hermes 2 Pro, Qwen2.5, Qwen3, QwQ (and any template of no known family)",
    markers=(OPEN,),
    stream=lambda tools, new_id: ToolCallStream(tools),
    forced=Forced(before=f"{OPEN}\n", after=f"\n{CLOSE}", between="\n"),
    triggers=(OPEN,),
    example=f'{OPEN}\\n{{"name": "f", "arguments": {{...}}}}\\n{CLOSE}',
)
