"""Chat: messages to a prompt through the model's template, and the model's answer back into
content, reasoning and tool calls in its family's own syntax (the dialects). Pure: no model,
no llama_cpp."""
