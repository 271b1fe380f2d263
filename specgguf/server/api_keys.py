"""serve's API keys: --api-key's comma list and --api-key-file's lines, merged.

The file holds one key a line; empty lines and lines that start with `#` are skipped (as
llama-server reads it), and each key loses the whitespace around it (a CRLF file's `\\r`
included), as a key sent in a request header does. The file is read within MAX_KEY_FILE
bytes: a key file is small, and a wrong path (a model, a device) must not be read whole."""

from __future__ import annotations

from pathlib import Path

from specgguf.errors import UsageError

#: the most bytes --api-key-file may hold
MAX_KEY_FILE = 1 << 20


def read_key_file(path: Path) -> tuple[str, ...]:
    """The keys of an --api-key-file, or one UsageError line (missing, too large, not text)."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_KEY_FILE + 1)
    except OSError as e:
        raise UsageError(f"--api-key-file {path}: {e.strerror}") from None
    if len(data) > MAX_KEY_FILE:
        raise UsageError(f"--api-key-file {path}: larger than {MAX_KEY_FILE} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"--api-key-file {path}: not UTF-8 text") from None
    keys = (line.strip() for line in text.splitlines() if not line.startswith("#"))
    return tuple(k for k in keys if k)


def api_keys(given: str | None, key_file: Path | None) -> tuple[str, ...]:
    """The keys of --api-key (a comma list) and --api-key-file together, each once, in order;
    one UsageError line where either was given and holds none."""
    keys = [k.strip() for k in (given or "").split(",") if k.strip()]
    if given is not None and not keys:
        raise UsageError("--api-key is empty")
    if key_file is not None:
        from_file = read_key_file(key_file)
        if not from_file:
            raise UsageError(f"--api-key-file {key_file}: no key in it")
        keys += from_file
    return tuple(dict.fromkeys(keys))
