"""serve --models-preset FILE: llama-server's INI file of router presets, read as it reads it.

The file: `[NAME]` sections, one per model, of `key = value` lines; `;` or `#` starts a comment
(at a line's start, or after a value: a value ends where whitespace and a comment begin);
the `version` key is skipped, and keys before any section make a model named `default`, as
llama-server reads them. A key is a flag's name
without its dashes, long or short (`ctx-size`, `c`), or its variable (`LLAMA_ARG_CTX_SIZE`);
a switch takes true/false (on/off, 1/0, enabled/disabled), and its negative spelling
(`no-warmup = true`) the opposite. The `[*]` section's options go to every model; a model's
own section wins over them, and the router's command line wins over both.

A section named as a --models-dir model adds its options to that model; any other section is
a model of its own and must name its file (`model`) or repository (`hf-repo`). Three keys are
the router's, not flags: `load-on-startup` (load it when the router starts), `stop-timeout`
(seconds a stopped model's server has before it is killed) and `dedup-cache-models` (about
llama-server's listing of its download cache, which this router does not list: accepted,
nothing to hide). Keys the router sets itself (host, port, API keys, TLS files, the router's
own flags) are refused with the reason, and so are a flag serve refuses and one of two values
(as llama-server refuses those): at start, in one line, never when the model is first asked
for."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from specgguf.errors import UsageError, read_user_text
from specgguf.flag_table.table import Flag, Status, row_of, rows_for
from specgguf.server.router import RouterModel

#: the largest preset file read (real ones are a few KiB)
MAX_PRESET_BYTES = 1 << 20
#: the most sections a file may hold (as many as the router serves models)
MAX_SECTIONS = 1024
GLOBAL = "*"
#: the section of the keys before any header (not a model: llama-server's "default")
DEFAULT = "default"
TRUTHY = ("on", "enabled", "true", "1")
FALSEY = ("off", "disabled", "false", "0")
#: the router's own keys, which are not flags
ROUTER_KEYS = ("load-on-startup", "stop-timeout", "dedup-cache-models")
#: the flags a model's server cannot take from a preset, and why
RESERVED = {
    "--host": "each model's server listens on 127.0.0.1, where the router reaches it",
    "--port": "each model's server listens on a free port the router picks",
    "--api-key": "the router checks the API keys: give them on its command line",
    "--api-key-file": "the router checks the API keys: give them on its command line",
    "--ssl-key-file": "the router speaks TLS, not the models' servers",
    "--ssl-cert-file": "the router speaks TLS, not the models' servers",
    "--models-dir": "a router option, not a model's",
    "--models-preset": "a router option, not a model's",
    "--models-max": "a router option, not a model's",
    "--models-autoload": "a router option, not a model's",
}

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_HEADER = re.compile(r"\[[ \t]*([^\]]*?)[ \t]*\][ \t]*(?:[;#].*)?")
_KV = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)[ \t]*=[ \t]*(.*)")
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)


def parse_ini(text: str, where: str) -> dict[str, dict[str, str]]:
    """The sections' keys and values, in llama.cpp's grammar (a repeated section starts
    over, a repeated key's last value wins); a line of none of its forms is one line of error."""
    sections: dict[str, dict[str, str]] = {}
    current = DEFAULT
    for n, raw in enumerate(re.split(r"\r\n|\n|\r", text), 1):
        line = raw.lstrip(" \t")
        if not line or line[0] in ";#":
            continue
        if m := _HEADER.fullmatch(line):
            current = m.group(1)
            sections[current] = {}
            if len(sections) > MAX_SECTIONS:
                raise UsageError(f"--models-preset {where}: more than {MAX_SECTIONS} sections")
            continue
        if m := _KV.fullmatch(line):
            value = re.split(r"[ \t]*[;#]", m.group(2), maxsplit=1)[0].rstrip(" \t")
            sections.setdefault(current, {})[m.group(1)] = value
            continue
        raise UsageError(f"--models-preset {where}: line {n} is not [SECTION], KEY = VALUE or "
                         "a comment")  # fmt: skip
    return sections


def canonical_name(section: str) -> str:
    """A section's model name as llama-server keys it: a `:TAG` suffix upper-cased (of a
    tag like `q4_k_m` or `model-q4_k_m`, its last part)."""
    if section in (GLOBAL, DEFAULT) or ":" not in section:
        return section
    head, tag = section.rsplit(":", 1)
    m = _TAG.search(tag)
    return f"{head}:{(m.group(1) if m else tag).upper()}"


@dataclass
class Preset:
    """One model's options from the file: flag values by row key, and the router's keys."""

    name: str
    values: dict[str, str] = field(default_factory=dict)  # Flag key -> value ("true"...)
    load_on_startup: bool = False
    stop_timeout: int | None = None

    def merged(self, over: Preset) -> Preset:
        """These options with `over`'s on top (the router's keys too, where it sets them)."""
        return Preset(over.name, {**self.values, **over.values},
                      over.load_on_startup or self.load_on_startup,
                      over.stop_timeout if over.stop_timeout is not None
                      else self.stop_timeout)  # fmt: skip


def _key_index() -> dict[str, tuple[Flag, bool]]:
    """Every name a key may have in a preset: (the row, whether it is a negative spelling)."""
    index: dict[str, tuple[Flag, bool]] = {}
    for row in rows_for("serve", *Status):
        for s in row.flag.spellings:
            index.setdefault(s.lstrip("-"), (row, False))
        for s in row.flag.negative:
            index.setdefault(s.lstrip("-"), (row, True))
        if row.flag.env:
            index.setdefault(row.flag.env, (row, False))
    return index


def _preset(name: str, keys: dict[str, str], where: str,
            index: dict[str, tuple[Flag, bool]]) -> Preset:  # fmt: skip
    out = Preset(name)
    for key, value in keys.items():
        if key == "version":
            continue
        if key == "load-on-startup":
            out.load_on_startup = value in TRUTHY
        elif key == "stop-timeout":
            if not value.isdigit() or int(value) > 3600:
                raise UsageError(f"--models-preset {where}: [{name}] stop-timeout must be "
                                 f"0..3600 seconds, not {value!r}")  # fmt: skip
            out.stop_timeout = int(value)
        elif key == "dedup-cache-models":
            continue  # nothing to hide: the router lists no download cache (module docstring)
        elif key not in index:
            raise UsageError(f"--models-preset {where}: option '{key}' not recognized in "
                             f"preset '{name}'")  # fmt: skip
        else:
            row, negative = index[key]
            if negative:
                value = "false" if value in TRUTHY else "true"
            why = RESERVED.get(row.key) or _refused(row, value)
            if why:
                raise UsageError(f"--models-preset {where}: [{name}] {key}: {why}")
            out.values[row.key] = value
    return out


def _refused(row: Flag, value: str) -> str | None:
    """Why serve would refuse the flag with this value (None: it takes it)."""
    if row.status in (Status.REFUSED, Status.REMOVED):
        return f"refused by serve: {row.entry.note}"
    if len(row.flag.values) > 1:
        return "it takes two values, which a preset cannot give (llama-server refuses it too)"
    if row.status is Status.ALWAYS and row.is_switch and (value not in FALSEY) != row.entry.always:
        return f"refused by serve: {row.entry.note}"
    return None


def read_presets(path: Path) -> tuple[Preset, dict[str, Preset]]:
    """The file's global options ([*]) and its models' presets by name (bounded, one line
    of error for anything wrong in it)."""
    where = str(path)
    text = read_user_text(path, "--models-preset", MAX_PRESET_BYTES)
    index = _key_index()
    glob = Preset(GLOBAL)
    models: dict[str, Preset] = {}
    for section, keys in parse_ini(text, where).items():
        name = canonical_name(section)
        preset = _preset(name, keys, where, index)
        if name == GLOBAL:
            glob = preset
        elif name != DEFAULT or preset.values:
            models[name] = preset
    return glob, models


def preset_args(values: dict[str, str]) -> list[str]:
    """Options as serve's arguments: a switch's last spelling, or its negative one for a false
    value (left out where it has none), else the last spelling and its value."""
    rows = {r.key: r for r in rows_for("serve", *Status)}
    out: list[str] = []
    for key, value in values.items():
        row = rows[key]
        if row.is_switch:
            if value in FALSEY:
                if row.flag.negative:
                    out.append(row.flag.negative[-1])
            else:
                out.append(row.flag.spellings[-1])
        else:
            out += [row.flag.spellings[-1], value]
    return out


def spelled(argv: list[str]) -> set[str]:
    """The row keys the router's command line gives (its options win over a preset's)."""
    rows = (row_of(arg.split("=", 1)[0]) for arg in argv)
    return {row.key for row in rows if row is not None and "serve" in row.commands}


def router_models(directory: dict[str, Path], glob: Preset, presets: dict[str, Preset],
                  given: set[str]) -> dict[str, RouterModel]:  # fmt: skip
    """The router's models: --models-dir's (with a same-named section's options) and the
    file's other sections, each with [*]'s options under its own, less those the router's
    command line gives (`given`, row keys: they reach every model's server from there)."""
    out: dict[str, RouterModel] = {}
    merged = {name: glob.merged(Preset(name, {"--model": str(path)}))
              for name, path in directory.items()}  # fmt: skip
    for name, preset in presets.items():
        if name in merged:
            merged[name] = merged[name].merged(preset)
            continue
        merged[name] = glob.merged(preset)
        if "--model" not in merged[name].values and "--hf-repo" not in merged[name].values:
            raise UsageError(f"--models-preset: [{name}] is no --models-dir model, so it must "
                             "name its model: model = PATH or hf-repo = USER/MODEL")
    for name, p in merged.items():
        values = {k: v for k, v in p.values.items() if k not in given}
        aliases = tuple(a.strip() for a in values.pop("--alias", "").split(",") if a.strip())
        model = values.get("--model")
        out[name] = RouterModel(name, Path(model) if model else None, tuple(preset_args(values)),
                                aliases, p.load_on_startup, p.stop_timeout)  # fmt: skip
    return out
