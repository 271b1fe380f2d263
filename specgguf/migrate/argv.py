"""Rewriting one command given as words: which tool it runs, its migrated words, and the
corrected command `specgguf run` prints when it refuses a removed flag.

The dialect rules live in llama_argv (llama.cpp's tools and specgguf) and vllm_argv; this
module finds the tool a command invokes and hands the words to the right one.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence

from specgguf.migrate import removed_flags as lg
from specgguf.migrate.llama_argv import migrate_llama
from specgguf.migrate.plan import Fragment, MigrationResult, Plan
from specgguf.migrate.vllm_argv import migrate_vllm

_IMAGE_TOOLS = (
    (re.compile(r"llama[._-]?cpp[^:\s]*:server(?:[-.:\w]*)$", re.I), lg.LLAMA_SERVER),
    (re.compile(r"llama[._-]?cpp[^:\s]*:light(?:[-.:\w]*)$", re.I), lg.LLAMA_CLI),
    (re.compile(r"(?:^|/)vllm-openai(?::[-.\w]+)?$"), lg.VLLM),
)


#: the llama.cpp image that holds every tool (`:full`), and the first argument that picks one
_FULL_IMAGE = re.compile(r"llama[._-]?cpp[^:\s]*:full(?:[-.:\w]*)$", re.I)
_FULL_IMAGE_TOOLS = {"--server": lg.LLAMA_SERVER, "-s": lg.LLAMA_SERVER, "--run": lg.LLAMA_CLI,
                     "-r": lg.LLAMA_CLI}


def image_tool(image: str) -> str | None:
    """The tool a container image runs by default (ghcr.io/ggml-org/llama.cpp:server...)."""
    for pattern, tool in _IMAGE_TOOLS:
        if pattern.search(image):
            return tool
    return None


def _basename(word: str) -> str:
    base = re.split(r"[/\\]", word)[-1]
    return base[:-4] if base.lower().endswith(".exe") else base


def find_anchor(words: Sequence[str]) -> tuple[int, str, int] | None:
    """(index, tool, words the tool name takes) of the first invocation in `words`."""
    for k, word in enumerate(words):
        base = _basename(word)
        if base in lg.LLAMA_TOOLS:
            return k, base, 1
        if base == lg.SPECGGUF:
            rest = [w for w in words[k + 1:] if not w.startswith("-")]
            return None if rest[:1] == ["migrate"] else (k, lg.SPECGGUF, 1)
        if base == "vllm" and words[k + 1:k + 2] == ["serve"]:
            return k, lg.VLLM, 2
        if word == "vllm.entrypoints.openai.api_server":
            return k, lg.VLLM, 1
        tool = image_tool(word)
        if tool:
            return k, tool, 1
        if _FULL_IMAGE.search(word) and k + 1 < len(words) \
                and words[k + 1] in _FULL_IMAGE_TOOLS:  # `llama.cpp:full --server -m ...`
            return k, _FULL_IMAGE_TOOLS[words[k + 1]], 2
    return None


def migrate_argv(argv: Sequence[str], *, tool: str | None = None,
                 dynamic: Iterable[int] = (), env_names: Iterable[str] = (),
                 draft_kind: str | None = None) -> MigrationResult:
    """Migrate one command given as words (`["llama-server", "-m", ...]`).

    `tool` forces the dialect when argv holds only arguments (a compose `command:` list under
    a llama.cpp image); `dynamic` marks words whose value the shell decides ($N); `env_names`
    are LLAMA_ARG_* variables set elsewhere in the same file, which may already set a value;
    `draft_kind` is what a draft that cannot be read is taken for (--draft-kind).
    """
    words = list(argv)
    start = 0
    if tool is None:
        anchor = find_anchor(words)
        tool, start = (anchor[1], anchor[0] + anchor[2]) if anchor else (lg.GENERIC, 0)
    elif words and _basename(words[0]) == tool:
        start = 2 if tool == lg.VLLM and words[1:2] == ["serve"] else 1
    return migrate_words(words, tool, start, frozenset(dynamic), frozenset(env_names),
                         draft_kind=draft_kind)


def migrate_words(argv: list[str], tool: str, start: int, dynamic: frozenset[int],
                  env_names: frozenset[str], base: str | None = None,
                  draft_kind: str | None = None, fragment: Fragment | None = None
                  ) -> MigrationResult:
    """migrate_argv once the tool is known: `start` is the first argument after the tool's
    name, `base` the directory relative draft paths are read from (a scanned file's);
    `fragment` is the file's context when the words do not name their tool."""
    plan = Plan(argv, tool, start, dynamic, env_names, base, draft_kind, fragment)
    if tool == lg.VLLM:
        migrate_vllm(plan)
    else:
        migrate_llama(plan)
    return plan.result()


def corrected_run_command(sub: str, args: Sequence[str], env: Mapping[str, str]
                          ) -> tuple[str, list[str]]:
    """The exact command to type instead, and what could not be corrected safely.

    Old variables become the equivalent options (the command line wins over the environment
    in llama.cpp, and --spec-type adds to what the environment selected) and are unset with
    `env -u`, so the corrected line works whatever the shell exports.
    """
    words = list(args)
    unset: list[str] = []
    if lg.SPEC_TYPE_ENV in env and any(t.strip() in lg.REMOVED_SPEC_TYPES
                                       for t in env[lg.SPEC_TYPE_ENV].split(",")):
        unset.append(lg.SPEC_TYPE_ENV)
        words += [lg.SPEC_TYPE_FLAG, env[lg.SPEC_TYPE_ENV]]
    for var, entry in lg.REMOVED_ENV.items():
        if var not in env:
            continue
        unset.append(var)
        given = {lg.normalize_flag(lg.split_flag(w)[0]) for w in words}
        replacements = {entry.draft_flag, *entry.ngram_flags.values()}
        if not given & (set(entry.names) | replacements):
            words += [entry.names[-1], env[var]]
    result = migrate_argv(words, tool=lg.SPECGGUF)
    prefix = ["env", *(x for var in unset for x in ("-u", var))] if unset else []
    return shlex.join([*prefix, "specgguf", sub, *result.argv]), result.unsafe
