"""specgguf's Typer front end, installed as the package `specgguf_cli`."""
