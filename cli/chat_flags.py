"""The chat template options `run` and `serve` share: --chat-template (a Jinja template or
the name of one of llama.cpp's built-in templates) and --chat-template-file, read into one
template source before any weight is."""

from __future__ import annotations

from pathlib import Path

import typer

from specgguf.chat.builtin_templates import names

ChatTemplate = typer.Option(
    None,
    "--chat-template",
    metavar="JINJA_TEMPLATE",
    envvar="LLAMA_ARG_CHAT_TEMPLATE",
    help="Chat template to use instead of the target GGUF's: a Jinja template, or the name of "
    f"a built-in one ({names()}).",
    show_default=False,
)
ChatTemplateFile = typer.Option(
    None,
    "--chat-template-file",
    envvar="LLAMA_ARG_CHAT_TEMPLATE_FILE",
    help="Jinja chat template to use instead of the target GGUF's tokenizer.chat_template.",
)


def template_source(value: str | None, file: Path | None) -> tuple[str | None, str | None]:
    """(Jinja source, where it came from) of --chat-template or --chat-template-file; (None,
    None): the target GGUF's. Both given, an unknown name, an unreadable file or a template
    that does not compile: one line, before any weight is read."""
    from specgguf.chat.template import ChatTemplate, read_template_file
    from specgguf.errors import UsageError

    if value is not None and file is not None:
        raise UsageError("--chat-template and --chat-template-file both give the chat "
                         "template: give one")  # fmt: skip
    if value is None and file is None:
        return None, None
    if value is not None:
        from specgguf.chat.builtin_templates import resolve

        src, origin = resolve(value)
    else:
        src, origin = read_template_file(file), f"--chat-template-file {file}"
    ChatTemplate.compile(src, origin)  # compiled again with the model's tokens once loaded
    return src, origin
