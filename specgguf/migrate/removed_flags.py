"""The flags llama.cpp removed from its speculative-decoding surface: one table for two users.

`specgguf run` refuses them exactly as llama.cpp does (same message, exit status 1, before any
model is loaded), so a script fails the same way against either tool; `specgguf migrate`
rewrites them. Both read the tables below, so they can never disagree about what was removed.

Sources (the llama.cpp tree vendored in llama-cpp-python 0.3.36, `common/arg.cpp`, section
"removed params", and `common/common.h`):

=================================  ==================================  =========================
removed (env)                      replacement                         llama.cpp prints "use ..."
=================================  ==================================  =========================
--draft, --draft-n, --draft-max    --spec-draft-n-max                  --spec-draft-n-max or
  (LLAMA_ARG_DRAFT_MAX)              (--spec-ngram-mod-n-max when the    --spec-ngram-mod-n-max
                                     only --spec-type is ngram-mod)
--draft-min, --draft-n-min         --spec-draft-n-min                  --spec-draft-n-min or
  (LLAMA_ARG_DRAFT_MIN)              (--spec-ngram-mod-n-min likewise)   --spec-ngram-mod-n-min
--spec-ngram-size-n                --spec-ngram-<type>-size-n,         the respective
                                     ngram-mod: --spec-ngram-mod-n-match --spec-ngram-*-size-n
--spec-ngram-size-m                --spec-ngram-<type>-size-m          ...-size-m
--spec-ngram-min-hits              --spec-ngram-<type>-min-hits        ...-min-hits
-cd, --ctx-size-draft              nothing: the draft context follows  (not declared any more:
                                     the target's (-c)                   "invalid argument")
--spec-type draft                  --spec-type draft-simple            (unknown type "draft")
=================================  ==================================  =========================

<type> is the single ngram type named by --spec-type in the same command; with none or several
the value cannot be placed safely and is reported instead of guessed.

Defaults that changed (a migrated command that relied on the old one gets it written out):

===================  ===========  ===========  =================================================
setting              old default  new default  source of the old value
===================  ===========  ===========  =================================================
draft n_max          16           3            common.h `common_params_speculative::n_max = 16`
                                               and tools/server/README.md "--draft-max ...
                                               (default: 16)", last releases before the spec-*
                                               rename; new: common.h `n_max = 3`
draft p_min          0.75         0.00         same README "--draft-p-min P ... (default:
                                               0.75)" and common.h `p_min = 0.75f`; releases of
                                               late 2024 had 0.9 (and n_min 5), we use the last
                                               value before the removal
draft n_min          0            0            unchanged in the last releases: nothing written
draft p_split        0.10         0.10         unchanged: nothing written (specgguf reads it
                                               with --spec-tree-topk > 1: where a tree branches)
draft context (-cd)  0 (= model)  = target's   README "-cd ... (default: 0, 0 = loaded from
                                               model)"; dropped, reported when it differed
===================  ===========  ===========  =================================================

Old names that still work upstream and are therefore NOT flagged: -md, --model-draft, -ngld,
--gpu-layers-draft, --n-gpu-layers-draft, --draft-p-min, --draft-p-split, -td, --threads-draft,
-ctkd, -ctvd.

vLLM's pre-0.8 speculative flags (folded into one --speculative-config JSON) are tabled here
too, so the rewrite and the token scan (guard) read one list. So are SGLang's names for the
shape of a draft tree (SGLANG_FLAGS), which a specgguf command may carry over from an SGLang
launch line: nothing removed them, so only a specgguf command gets specgguf's names for them
(sglang_argv), and `run` neither refuses them nor does the token scan look for them.

This module must stay cheap to import: `specgguf run` checks its argv against these tables
before anything else (specgguf.migrate.refuse), so it imports only the standard library and
nothing from the rest of the migration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specgguf.flag_table.table import flag_table, row_of

# Tools whose command lines the migration understands. The names are the binaries' basenames.
LLAMA_SERVER = "llama-server"
LLAMA_CLI = "llama-cli"
LLAMA_SPECULATIVE = "llama-speculative"
LLAMA_SPECULATIVE_SIMPLE = "llama-speculative-simple"
LLAMA_LOOKUP = "llama-lookup"
SPECGGUF = "specgguf"
VLLM = "vllm"
GENERIC = "llama"  # flags seen without a recognisable tool: rename only, add nothing

def _row(key: str):  # noqa: ANN202 - specgguf.flag_table.table.Flag
    row = row_of(key)
    if row is None:
        raise KeyError(f"{key} is not in the flag table")
    return row


def spellings(key: str) -> tuple[str, ...]:
    """Every spelling llama.cpp's --help gives the option `key` (the flag table's row)."""
    return _row(key).flag.spellings


def value_flags() -> dict[str, int]:
    """Every spelling of every llama.cpp option that takes a value (one word; an optional
    value, `[on|off]`, cannot be told from the next option, so those take none here)."""
    return {name: 1 for row in flag_table() if row.flag.values
            and not row.flag.values[0].startswith("[") for name in row.flag.spellings}  # fmt: skip


LLAMA_TOOLS = frozenset(
    {LLAMA_SERVER, LLAMA_CLI, LLAMA_SPECULATIVE, LLAMA_SPECULATIVE_SIMPLE, LLAMA_LOOKUP}
)
#: tools that select a draft model through --spec-type (llama-speculative loads -md directly)
SPEC_TYPE_TOOLS = frozenset({LLAMA_SERVER, LLAMA_CLI, LLAMA_SPECULATIVE_SIMPLE})


@dataclass(frozen=True)
class RemovedFlag:
    """One removed option, with every spelling llama.cpp declared for it.

    `draft_flag` replaces it when the value bounds a draft model (or the tool has no
    --spec-type); `ngram_flags` replaces it per ngram type. A None target means "no
    equivalent": such a value is reported, never dropped silently.
    """

    kind: str
    names: tuple[str, ...]
    hint: str
    env: str | None = None
    new_env: str | None = None
    draft_flag: str | None = None
    ngram_flags: Mapping[str, str | None] = field(default_factory=dict)


#: the ngram types that kept each removed --spec-ngram-* option under their own name
_OWN_NGRAM_OPTIONS = ("ngram-simple", "ngram-map-k", "ngram-map-k4v")


def _per_ngram_type(option: str, mod: str | None) -> dict[str, str | None]:
    """What replaces the removed --spec-ngram-<option> under each ngram type:
    --spec-<type>-<option>, ngram-mod's own flag (`mod`, None: it has none), and nothing for
    ngram-cache (whose options are files)."""
    own: dict[str, str | None] = {t: f"--spec-{t}-{option}" for t in _OWN_NGRAM_OPTIONS}
    return {**own, "ngram-mod": mod, "ngram-cache": None}


REMOVED_FLAGS: tuple[RemovedFlag, ...] = (
    # the draft lengths, n_max (--draft, --draft-n, --draft-max) and n_min: a draft model's
    # --spec-draft-n-<bound>, or ngram-mod's --spec-ngram-mod-n-<bound>
    *(
        RemovedFlag(
            kind=f"n_{bound}",
            names=spellings(key),
            hint=f"use --spec-draft-n-{bound} or --spec-ngram-mod-n-{bound}",
            env=_row(key).flag.env,
            new_env=f"LLAMA_ARG_SPEC_DRAFT_N_{bound.upper()}",
            draft_flag=f"--spec-draft-n-{bound}",
            ngram_flags={"ngram-mod": f"--spec-ngram-mod-n-{bound}"},
        )
        for bound, key in (("max", "--draft"), ("min", "--draft-min"))
    ),
    # --spec-ngram-size-n, -size-m, -min-hits: each ngram type has its own now (ngram-mod
    # only a match length, ngram-cache none)
    *(
        RemovedFlag(
            kind=f"ngram_{option.replace('-', '_')}",
            names=spellings(f"--spec-ngram-{option}"),
            hint=f"use the respective --spec-ngram-*-{option}",
            ngram_flags=_per_ngram_type(option, mod),
        )
        for option, mod in (
            ("size-n", "--spec-ngram-mod-n-match"), ("size-m", None), ("min-hits", None)
        )
    ),
    RemovedFlag(
        kind="ctx_draft",
        names=("-cd", "--ctx-size-draft"),
        hint="the draft context now follows the target's (-c)",
    ),
)

REMOVED_BY_NAME: dict[str, RemovedFlag] = {n: f for f in REMOVED_FLAGS for n in f.names}
#: environment variables llama.cpp still declares only to refuse them
REMOVED_ENV: dict[str, RemovedFlag] = {f.env: f for f in REMOVED_FLAGS if f.env}

#: renamed --spec-type values
REMOVED_SPEC_TYPES: dict[str, str] = {"draft": "draft-simple"}

#: old variable names llama.cpp now ignores silently (worse than an error): rename in files
RENAMED_ENV: dict[str, str] = {
    "LLAMA_ARG_DRAFT_MAX": "LLAMA_ARG_SPEC_DRAFT_N_MAX",
    "LLAMA_ARG_DRAFT_MIN": "LLAMA_ARG_SPEC_DRAFT_N_MIN",
    "LLAMA_ARG_DRAFT_P_MIN": "LLAMA_ARG_SPEC_DRAFT_P_MIN",
    "LLAMA_ARG_MODEL_DRAFT": "LLAMA_ARG_SPEC_DRAFT_MODEL",
}
#: old variables with no successor at all
DEAD_ENV: dict[str, str] = {
    "LLAMA_ARG_CTX_SIZE_DRAFT": "has no effect any more (the draft context follows the "
    "target's); remove it",
}

#: spellings that name a draft model (old aliases still accepted upstream included)
DRAFT_MODEL_FLAGS = frozenset({*spellings("--spec-draft-model"), *spellings("--spec-draft-hf")})
CTX_FLAGS = frozenset(spellings("--ctx-size"))
SPEC_TYPE_FLAG = "--spec-type"
SPEC_TYPE_ENV = "LLAMA_ARG_SPEC_TYPE"
#: prefixes only the new surface has: a command using them was written for new llama.cpp
NEW_ONLY_PREFIXES = ("--spec-draft-", "--spec-ngram-simple-", "--spec-ngram-map-k",
                     "--spec-ngram-mod-")


@dataclass(frozen=True)
class OldDefault:
    """A default that changed under a command that did not set it."""

    flag: str
    aliases: tuple[str, ...]
    old: str
    new: str
    envs: tuple[str, ...]
    tools: frozenset[str]
    what: str


OLD_DEFAULTS: tuple[OldDefault, ...] = (
    OldDefault(
        flag="--spec-draft-n-max",
        aliases=("--draft", "--draft-n", "--draft-max"),
        old="16",
        new="3",
        envs=("LLAMA_ARG_DRAFT_MAX", "LLAMA_ARG_SPEC_DRAFT_N_MAX"),
        tools=frozenset({LLAMA_SERVER, LLAMA_CLI, LLAMA_SPECULATIVE_SIMPLE, LLAMA_SPECULATIVE,
                         LLAMA_LOOKUP}),
        what="--draft-max",
    ),
    OldDefault(
        flag="--spec-draft-p-min",
        aliases=("--draft-p-min",),
        old="0.75",
        new="0.00",
        envs=("LLAMA_ARG_DRAFT_P_MIN", "LLAMA_ARG_SPEC_DRAFT_P_MIN"),
        tools=SPEC_TYPE_TOOLS,
        what="--draft-p-min",
    ),
)


#: vLLM's pre-0.8 flags and the --speculative-config key each became
VLLM_KEYS: dict[str, tuple[str, type]] = {
    "--speculative-model": ("model", str),
    "--num-speculative-tokens": ("num_speculative_tokens", int),
    "--ngram-prompt-lookup-max": ("prompt_lookup_max", int),
    "--ngram-prompt-lookup-min": ("prompt_lookup_min", int),
    "--speculative-draft-tensor-parallel-size": ("draft_tensor_parallel_size", int),
    "-spec-draft-tp": ("draft_tensor_parallel_size", int),
    "--speculative-max-model-len": ("max_model_len", int),
    "--speculative-model-quantization": ("quantization", str),
}
#: V0-only knobs with no --speculative-config key today: reported, never dropped silently
VLLM_GONE: dict[str, int] = {
    # current SpeculativeConfig has no disable_by_batch_size: vLLM rejects the key
    "--speculative-disable-by-batch-size": 1,
    "--spec-decoding-acceptance-method": 1,
    "--typical-acceptance-sampler-posterior-threshold": 1,
    "--typical-acceptance-sampler-posterior-alpha": 1,
    "--speculative-disable-mqa-scorer": 0,
    "--disable-logprobs-during-spec-decoding": 0,
}



@dataclass(frozen=True)
class SglangFlag:
    """SGLang's name for an option of specgguf's tree drafts, and how its value carries over.

    `offset` is added to the value (SGLang's draft-token count includes the tree's root, which
    specgguf's node count does not); `bounds` is the range specgguf accepts, which a value
    outside is clamped into, with a warning (None: the value is renamed as written).
    """

    new: str
    offset: int = 0
    bounds: tuple[int, int] | None = None
    meaning: str = ""  # what the value counts, for the warning when it is clamped


#: specgguf.core.tree's TOPK_MAX and NODES_MAX. The migration imports no runtime module (its
#: import contract), so the two bounds are repeated here; tests/test_migrate_sglang.py keeps
#: them equal to core's.
TREE_TOPK_MAX = 10
TREE_NODES_MAX = 64

#: SGLang's EAGLE tree flags -> specgguf's. --speculative-num-steps is the tree's depth, which
#: specgguf's --spec-draft-n-max is; a node count under 1 is clamped to 1, since specgguf's 0
#: means "no cap" where SGLang's 1 (its root alone) drafts nothing.
SGLANG_FLAGS: dict[str, SglangFlag] = {
    "--speculative-eagle-topk": SglangFlag(
        "--spec-tree-topk", bounds=(1, TREE_TOPK_MAX), meaning="children per tree node"),
    "--speculative-num-steps": SglangFlag("--spec-draft-n-max"),
    "--speculative-num-draft-tokens": SglangFlag(
        "--spec-tree-nodes", offset=-1, bounds=(1, TREE_NODES_MAX),
        meaning="tree nodes verified per round"),
}

#: the llama.cpp options whose value is free text or a path (their spellings: the flag table's)
_FREE_TEXT = ("--model", "--prompt", "--file", "--system-prompt", "--reverse-prompt",
              "--in-prefix", "--in-suffix", "--grammar", "--json-schema", "--chat-template",
              "--api-key", "--alias", "--chat-template-kwargs")  # fmt: skip
#: options whose value is free text or a path, with how many words they take: what follows
#: them is never an option, even when it reads "--draft-max" (llama.cpp consumes it as the value)
TEXT_VALUE_FLAGS: dict[str, int] = {
    **{name: 1 for key in _FREE_TEXT for name in spellings(key)},
    "--spec-replace": 2,  # an older llama.cpp's two-word option, absent from the pinned --help
    **{name: 1 for name in DRAFT_MODEL_FLAGS},
}


def normalize_flag(token: str) -> str:
    """llama.cpp (and vLLM) accept `--a_b` for `--a-b`; short flags are taken as written."""
    return token.replace("_", "-") if token.startswith("--") else token


def split_flag(token: str) -> tuple[str, str | None]:
    """`--flag=value` -> ("--flag", "value"); anything else -> (token, None)."""
    if token.startswith("-") and "=" in token:
        name, value = token.split("=", 1)
        return name, value
    return token, None


def removed_message(name: str, entry: RemovedFlag, *, env: bool = False) -> str:
    """llama.cpp's wording, so scripts and people see the same line from either tool."""
    where = "environment variable" if env else "argument"
    return f'error while handling {where} "{name}": the argument has been removed. {entry.hint}'


def removed_type(value: str) -> str | None:
    """The first removed type in a --spec-type comma list (`ngram-simple,draft`), or None."""
    return next((t.strip() for t in value.split(",") if t.strip() in REMOVED_SPEC_TYPES), None)


def removed_type_reason(old: str) -> str:
    """Why a --spec-type value is refused: the one wording `run`, `bench` and `migrate` print."""
    return f'the speculative type "{old}" has been removed. use {REMOVED_SPEC_TYPES[old]}'


def spec_type_message(name: str, value: str, *, env: bool = False) -> str:
    """llama.cpp's frame around removed_type_reason for the first removed type in `value`."""
    where = "environment variable" if env else "argument"
    old = removed_type(value)
    if old is None:
        raise ValueError(f"no removed speculative type in {value!r}")
    return f'error while handling {where} "{name}": {removed_type_reason(old)}'


def _has_removed_type(value: str) -> bool:
    return removed_type(value) is not None


def first_refusal(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The line llama.cpp would print for the first removed item, or None.

    llama.cpp reads environment variables before the command line, so an old variable is
    reported first even when an old flag follows.
    """
    # arg.cpp declares --spec-type before the removed options, and walks them in that order
    if SPEC_TYPE_ENV in env and _has_removed_type(env[SPEC_TYPE_ENV]):
        return spec_type_message(SPEC_TYPE_ENV, env[SPEC_TYPE_ENV], env=True)
    for var, entry in REMOVED_ENV.items():
        if var in env:
            return removed_message(var, entry, env=True)
    i = 0
    while i < len(argv):
        name, value = split_flag(argv[i])
        name = normalize_flag(name)
        i += 1
        if name in REMOVED_BY_NAME:
            return removed_message(name, REMOVED_BY_NAME[name])
        if name == SPEC_TYPE_FLAG:
            if value is None and i < len(argv):
                value, i = argv[i], i + 1
            if value is not None and _has_removed_type(value):
                return spec_type_message(SPEC_TYPE_FLAG, value)
        elif value is None:
            i += TEXT_VALUE_FLAGS.get(name, 0)
    return None

