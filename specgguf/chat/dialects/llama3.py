"""Llama 3.1 / 3.2 / 3.3: a call is the whole answer, one JSON object with the tool's name and
its `parameters` (the bare-object form of the Hermes parser reads it)."""

from specgguf.chat.dialects.base import Dialect, Forced
from specgguf.chat.tools import ToolCallStream

DIALECT = Dialect(
    name="llama3",
    family="Llama 3.1, 3.2, 3.3",
    markers=("<|start_header_id|>", "ipython"),
    stream=lambda tools, new_id: ToolCallStream(tools),
    forced=Forced(before="", args_key="parameters"),
    triggers=('{"',),
    triggers_at_start=True,
    example='{"name": "f", "parameters": {...}}',
)
