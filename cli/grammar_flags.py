"""llama.cpp's flags for constrained output, read into one OutputGrammar.

`--grammar GBNF`, `--grammar-file FILE`, `-j/--json-schema SCHEMA` and `-jf/--json-schema-file
FILE` mean what they mean in llama.cpp; llama.cpp lets the last one win, specgguf refuses two
at once (one of them would be silently ignored). A schema is turned into GBNF here, before
any weight is read; a grammar that does not parse is refused when the first prompt starts
(llama.cpp parses it against the model's vocabulary). Either way: one line, exit 1.
"""

from __future__ import annotations

from pathlib import Path

import typer

from specgguf.errors import UsageError, read_user_text

Grammar = typer.Option(
    None,
    "--grammar",
    help="GBNF grammar the output must match (llama.cpp's syntax, root rule `root`). "
    "Speculation stays exact: drafted tokens the grammar forbids are rejected.",
)
GrammarFile = typer.Option(None, "--grammar-file", help="File to read the --grammar from.")
JsonSchema = typer.Option(
    None,
    "-j",
    "--json-schema",
    help='JSON schema the output must match, e.g. \'{"type": "object"}\' for any JSON object.',
)
JsonSchemaFile = typer.Option(
    None, "-jf", "--json-schema-file", help="File containing a JSON schema (as -j)."
)


def read_grammar(
    grammar: str | None,
    grammar_file: Path | None,
    json_schema: str | None,
    json_schema_file: Path | None,
):
    """The OutputGrammar the four flags ask for (None: free text); UsageError for two at
    once, an unreadable file, a schema that is not JSON or cannot be converted."""
    from specgguf.generator import OutputGrammar

    given = [
        (flag, value)
        for flag, value in (
            ("--grammar", grammar),
            ("--grammar-file", grammar_file),
            ("-j/--json-schema", json_schema),
            ("-jf/--json-schema-file", json_schema_file),
        )
        if value is not None
    ]
    if not given:
        return None
    if len(given) > 1:
        raise UsageError(f"{given[0][0]} and {given[1][0]} cannot be combined: give one grammar")
    flag, value = given[0]
    if flag == "--grammar":
        return OutputGrammar(value, flag)
    if flag == "--grammar-file":
        return OutputGrammar(read_user_text(value, flag), f"{flag} {value}")
    if flag == "-j/--json-schema":
        return OutputGrammar.from_schema(value, "-j/--json-schema")
    return OutputGrammar.from_schema(read_user_text(value, "-jf"), f"-jf {value}")
