"""Option declarations shared by `run`, `bench` and `serve`, with llama.cpp's names, aliases and
defaults, plus the validation llama.cpp performs (so a bad value fails before a model is
loaded). The loading and drafting flags all three take are one table, SESSION_FLAGS, which
`with_session_flags` adds to a command as one `SessionFlags`: the one way those flags become
a loaded Session. The speculation, sampling and grammar flags `run` and `serve` both take are
another, GENERATION_FLAGS, added by `with_generation_flags` as one `GenerationFlags`."""

from __future__ import annotations

import functools
import inspect
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from specgguf_cli import grammar_flags as gf
from specgguf_cli import sampler_flags

from specgguf.core.tree import AUTO_TREE, CHAIN, NODES_MAX, TOPK_MAX, TreeShape
from specgguf.drafters.draft_lengths import AUTO_N_MAX_CAP, DRAFT_SAMPLING_MODES, N_MAX_LIMIT
from specgguf.drafters.registry import REGISTRY
from specgguf.drafters.spec_types import AUTO_DEFAULT_NGRAM
from specgguf.errors import UsageError, open_user_file
from specgguf.io.sampling_fields import flag_error
from specgguf.modelfiles.ggml_types import FLASH_ATTN, KV_CACHE_TYPES


def one_of(choices: Sequence[str]) -> str:
    """How help and error messages list a flag's choices: "a, b or c"."""
    return ", ".join(choices[:-1]) + " or " + choices[-1] if len(choices) > 1 else choices[0]


#: the --spec-type names this package runs, in priority order (the registry's supported rows)
SUPPORTED_SPEC_TYPES = tuple(t.name for t in REGISTRY if t.unsupported is None)

Model = typer.Option(
    None,
    "-m",
    "--model",
    envvar="LLAMA_ARG_MODEL",
    help="Target GGUF. Default: the pulled Qwen2.5-Coder-1.5B (see `specgguf pull`).",
)
ModelDraft = typer.Option(
    None,
    "-md",
    "--model-draft",
    "--spec-draft-model",
    envvar="LLAMA_ARG_SPEC_DRAFT_MODEL",
    help="Draft GGUF of the target's family. Default with no -m: the pulled Qwen2.5-Coder-0.5B.",
)
ModelUrl = typer.Option(
    None,
    "-mu",
    "--model-url",
    envvar="LLAMA_ARG_MODEL_URL",
    help="Target by address: the GGUF at this http(s) URL, downloaded into llama.cpp's cache "
    "(LLAMA_CACHE, else ~/.cache/llama.cpp; resumable, with a progress bar) unless it is "
    "there. Instead of -m.",
    show_default=False,
)
HfRepo = typer.Option(
    None,
    "-hf",
    "-hfr",
    "--hf-repo",
    envvar="LLAMA_ARG_HF_REPO",
    help="Target by name: a Hugging Face repository, user/model[:QUANT] (quant case-insensitive; "
    "default Q4_K_M, else Q8_0, else the repository's first GGUF), downloaded into the Hub "
    "cache (resumable, checksummed) unless it is there. Instead of -m.",
)
HfFile = typer.Option(
    None, "-hff", "--hf-file", envvar="LLAMA_ARG_HF_FILE",
    help="The file of -hf's repository to use (overrides its quant).",
)  # fmt: skip
HfRepoDraft = typer.Option(
    None,
    "--spec-draft-hf",
    "-hfd",
    "-hfrd",
    "--hf-repo-draft",
    envvar="LLAMA_ARG_SPEC_DRAFT_HF_REPO",
    help="Draft model by name, as -hf (instead of -md).",
)
HfToken = typer.Option(
    None, "-hft", "--hf-token", envvar="HF_TOKEN",
    help="Hugging Face token for -hf/-hfd (private or gated repositories).",
)  # fmt: skip
Offline = typer.Option(
    False, "--offline", envvar="LLAMA_ARG_OFFLINE",
    help="-hf/-hfd use the cache only: nothing is downloaded (one line, exit 6, when missing).",
)  # fmt: skip
SpecType = typer.Option(
    None,
    "--spec-type",
    envvar="LLAMA_ARG_SPEC_TYPE",
    help=f"Comma list of: none, {', '.join(SUPPORTED_SPEC_TYPES)} (tried in llama.cpp's priority "
    "order; `none` resets the list). "
    f"Default under --spec-draft-n-max auto: {', '.join(AUTO_DEFAULT_NGRAM)} (free n-gram "
    "lookup), plus draft-simple when a draft model is given; auto sends each one's drafts only "
    "while they pay, so where none does this is plain decoding. With a fixed "
    "--spec-draft-n-max: none, or draft-simple with -md. `--spec-type none`: plain decoding.",
)
NMax = typer.Option(
    "auto",
    "--spec-draft-n-max",
    envvar="LLAMA_ARG_SPEC_DRAFT_N_MAX",
    help=f"Max tokens to draft per round, or `auto` to choose 0..{AUTO_N_MAX_CAP} each round "
    "from measured costs and acceptance.",
)
SpecVocabStrict = typer.Option(
    False,
    "--spec-vocab-strict",
    help="Refuse a draft model whose vocabulary differs from the target's (llama.cpp's rule, "
    "exit 4) instead of drafting through text.",
)
NoTextViews = typer.Option(
    False,
    "--no-spec-text-views",
    help="The n-gram lookups read the prompt only, not also its JSON-escaped and unescaped "
    "spellings (which let them copy a file from the prompt into a tool call's string "
    "arguments, and an escaped tool result out as plain text).",
)
NoAutoProfile = typer.Option(
    False,
    "--no-auto-profile",
    help="With --spec-draft-n-max auto: neither read nor update this machine's cost profile "
    "($SPECGGUF_PROFILES, default ~/.cache/specgguf/profiles); every run then measures its "
    "costs from scratch.",
)
NMin = typer.Option(
    0,
    "--spec-draft-n-min",
    envvar="LLAMA_ARG_SPEC_DRAFT_N_MIN",
    help="Min draft length; shorter drafts are thrown away.",
)
PMin = typer.Option(
    0.0,
    "--spec-draft-p-min",
    "--draft-p-min",
    envvar="LLAMA_ARG_SPEC_DRAFT_P_MIN",
    help="Stop drafting when the draft's top probability is below this.",
)
PSplit = typer.Option(
    CHAIN.p_split,
    "--spec-draft-p-split",
    "--draft-p-split",
    envvar="LLAMA_ARG_SPEC_DRAFT_P_SPLIT",
    help="With --spec-tree-topk > 1: a token other than the draft's best becomes a branch "
    "of the tree where the draft gives it at least this probability.",
)
TreeTopk = typer.Option(
    None,
    "--spec-tree-topk",
    envvar="LLAMA_ARG_SPEC_TREE_TOPK",
    help=f"Draft a tree: up to K children per node and K branches per depth (1..{TOPK_MAX}; "
    "SGLang's --speculative-eagle-topk), verified in one target pass. 1: chains. Default: "
    f"chains with a fixed --spec-draft-n-max; under auto, up to {AUTO_TREE.topk} (with "
    f"{AUTO_TREE.nodes} nodes), auto drafting a tree only in rounds where trees measure "
    "faster than chains.",
)
TreeNodes = typer.Option(
    CHAIN.nodes,
    "--spec-tree-nodes",
    envvar="LLAMA_ARG_SPEC_TREE_NODES",
    help=f"The most tree nodes verified per round (0..{NODES_MAX}; 0: depth x topk; SGLang's "
    "--speculative-num-draft-tokens minus one).",
)
DraftSampling = typer.Option(
    "auto",
    "--spec-draft-sampling",
    envvar="LLAMA_ARG_SPEC_DRAFT_SAMPLING",
    help="greedy (llama.cpp's default: propose the draft's argmax; sampled output is then "
    "token for token that of plain decoding with the same seed) or probabilistic (sample the "
    "draft with the same sampler chain and use rejection sampling: more accepted at --temp > "
    "0, but the text then depends on the draft lengths). auto: probabilistic when --temp > 0 "
    "and --spec-draft-n-max is a number, greedy otherwise.",
)
NGL = typer.Option(
    "auto",
    "-ngl",
    "--n-gpu-layers",
    "--gpu-layers",
    envvar="LLAMA_ARG_N_GPU_LAYERS",
    help="Layers to offload to the GPU: N, auto or all.",
)
NGLD = typer.Option(
    "auto",
    "-ngld",
    "--spec-draft-ngl",
    "--gpu-layers-draft",
    "--n-gpu-layers-draft",
    envvar="LLAMA_ARG_N_GPU_LAYERS_DRAFT",
    help="Draft layers to offload: N, auto or all.",
)
Ctx = typer.Option(
    None,
    "-c",
    "--ctx-size",
    envvar="LLAMA_ARG_CTX_SIZE",
    show_default=False,
    help="Context size in tokens. Default: 4096, or the model's training context when that "
    "is smaller; 0: the model's training context. The draft uses the same.",
)
Batch = typer.Option(
    2048, "-b", "--batch-size", envvar="LLAMA_ARG_BATCH", help="Logical batch size."
)
FlashAttn = typer.Option(
    "auto",
    "-fa",
    "--flash-attn",
    envvar="LLAMA_ARG_FLASH_ATTN",
    help=f"Flash attention: {one_of(list(FLASH_ATTN))}.",
)
Threads = typer.Option(
    0,
    "-t",
    "--threads",
    envvar="LLAMA_ARG_THREADS",
    help="Threads, 1..512 (0 or -1: all usable cores).",
)
ThreadsDraft = typer.Option(
    0,
    "-td",
    "--threads-draft",
    "--spec-draft-threads",
    help="Draft threads, 1..512 (0 or -1: same as -t).",
)
Rpc = typer.Option(
    None,
    "--rpc",
    envvar="LLAMA_ARG_RPC",
    help="Comma list of ggml RPC workers HOST:PORT (`specgguf rpc-server` or llama.cpp's "
    "rpc-server of the same ggml version): each becomes a device (RPC0, RPC1, ...) and -ngl "
    "offloads layers across them. No authentication: use trusted networks only.",
)
Device = typer.Option(
    None,
    "-dev",
    "--device",
    envvar="LLAMA_ARG_DEVICE",
    help="Comma list of devices to offload the target to (none: no offload; default: all). "
    "See --list-devices.",
)
DeviceDraft = typer.Option(
    None,
    "-devd",
    "--spec-draft-device",
    "--device-draft",
    help="Comma list of devices for the draft model (none: no offload; default: follows -dev).",
)
ListDevices = typer.Option(
    False, "--list-devices", help="Print the available devices (after --rpc) and exit."
)
CacheList = typer.Option(
    False, "-cl", "--cache-list",
    help="List the models downloaded by name (-hf) in the Hub cache, as llama.cpp does "
    "(user/model:TAG), and exit.",
)
CompletionBash = typer.Option(
    False, "--completion-bash",
    help="Print a bash completion script for specgguf (source <(specgguf run "
    "--completion-bash)) and exit.",
)
Version = typer.Option(
    False, "--version", help="Print the version (llama.cpp's two lines) and exit."
)
NoRepack = typer.Option(
    False,
    "-nr",
    "--no-repack/--repack",
    envvar="LLAMA_ARG_NO_REPACK",
    help="Disable weight repacking (llama.cpp's workaround for crashing "
    "repacked kernels; about 15% slower here).",
)
_KV_HELP = f"KV cache data type: {', '.join(KV_CACHE_TYPES)}."
CacheTypeK = typer.Option(
    "f16", "-ctk", "--cache-type-k", envvar="LLAMA_ARG_CACHE_TYPE_K", help="Target " + _KV_HELP
)
CacheTypeV = typer.Option(
    "f16", "-ctv", "--cache-type-v", envvar="LLAMA_ARG_CACHE_TYPE_V", help="Target " + _KV_HELP
)
CacheTypeKDraft = typer.Option(
    "f16",
    "-ctkd",
    "--spec-draft-type-k",
    "--cache-type-k-draft",
    envvar="LLAMA_ARG_CACHE_TYPE_K_DRAFT",
    help="Draft " + _KV_HELP,
)
CacheTypeVDraft = typer.Option(
    "f16",
    "-ctvd",
    "--spec-draft-type-v",
    "--cache-type-v-draft",
    envvar="LLAMA_ARG_CACHE_TYPE_V_DRAFT",
    help="Draft " + _KV_HELP,
)


def validate_cache_types(**flags: str) -> None:
    """llama.cpp's kv_cache_types; checked before any model is loaded."""
    for flag, value in flags.items():
        if value not in KV_CACHE_TYPES:
            raise UsageError(
                f"invalid value for {flag}: {value!r} (one of: {', '.join(KV_CACHE_TYPES)})"
            )


NPredict = typer.Option(
    -1,
    "-n",
    "--n-predict",
    "--predict",
    envvar="LLAMA_ARG_N_PREDICT",
    help="Tokens to generate (-1: until EOS or the context is full).",
)
Prompt = typer.Option(None, "-p", "--prompt", help="Prompt text (else -f, else stdin).")
File = typer.Option(None, "-f", "--file", help="Read the prompt from a UTF-8 file.")
Seed = typer.Option(-1, "-s", "--seed", envvar="LLAMA_ARG_SEED", help="RNG seed (-1: random).")
IgnoreEos = typer.Option(
    False, "--ignore-eos", help="Keep generating past end-of-generation tokens."
)
ReasoningBudget = typer.Option(
    -1,
    "--reasoning-budget",
    envvar="LLAMA_ARG_THINK_BUDGET",
    help="Token budget for a chat answer's thinking: after N tokens the thinking is closed "
    "(the template family's closing is forced); 0 ends it at once, -1 leaves it unlimited. "
    "A request's reasoning_budget_tokens overrides it.",
)
ReasoningBudgetMessage = typer.Option(
    "",
    "--reasoning-budget-message",
    envvar="LLAMA_ARG_THINK_BUDGET_MESSAGE",
    help="Text forced before the closing of the thinking when --reasoning-budget is spent.",
    show_default=False,
)
#: the longest --reasoning-budget-message (and a request's reasoning_budget_message)
MAX_BUDGET_MESSAGE = 1024
Json = typer.Option(False, "--json", help="Print one JSON object on stdout instead of the text.")
Verbose = typer.Option(
    False, "-v", "--verbose", "--log-verbose", help="Show llama.cpp's own log on stderr."
)
Quiet = typer.Option(False, "-q", "--quiet", help="No statistics or progress on stderr.")

#: ggml's GGML_MAX_N_THREADS: a thread pool larger than this overruns ggml's fixed-size
#: per-thread arrays (a segfault, no message), so larger -t/-td values are refused up front.
MAX_THREADS = 512


def parse_n_max(value: str) -> int | None:
    """An int in 0..N_MAX_LIMIT, or None for `auto`."""
    if value.strip().lower() == "auto":
        return None
    try:
        n = int(value)
    except ValueError:
        raise UsageError(
            f"invalid value for --spec-draft-n-max: {value!r} (expected a number or 'auto')"
        ) from None
    if not 0 <= n <= N_MAX_LIMIT:
        raise UsageError(f"invalid value for --spec-draft-n-max: {n} (must be 0..{N_MAX_LIMIT})")
    return n


def validate(
    *,
    n_predict: int,
    n_min: int,
    p_min: float,
    p_split: float,
    temp: float,
    top_p: float,
    min_p: float,
    ctx: int | None,
    threads: int,
    threads_draft: int,
    flash_attn: str,
    draft_sampling: str,
    batch: int,
    seed: int | None = None,
    tree_topk: int | None = None,
    tree_nodes: int = CHAIN.nodes,
) -> None:
    checks = [
        (0 <= n_min <= N_MAX_LIMIT, f"--spec-draft-n-min: {n_min} (must be 0..{N_MAX_LIMIT})"),
        (0.0 <= p_min <= 1.0, f"--spec-draft-p-min: {p_min} (must be in [0, 1])"),
        (0.0 <= p_split <= 1.0, f"--spec-draft-p-split: {p_split} (must be in [0, 1])"),
        (
            tree_topk is None or 1 <= tree_topk <= TOPK_MAX,
            f"--spec-tree-topk: {tree_topk} (must be 1..{TOPK_MAX})",
        ),
        (
            0 <= tree_nodes <= NODES_MAX,
            f"--spec-tree-nodes: {tree_nodes} (must be 0..{NODES_MAX})",
        ),
        (ctx is None or ctx >= 0, f"-c/--ctx-size: {ctx} (must be >= 0; 0: the model's)"),
        # llama.cpp reads any -t <= 0 as "all cores"; we take 0 and -1 and refuse the rest,
        # which are typos more often than intentions.
        (
            -1 <= threads <= MAX_THREADS,
            f"-t/--threads: {threads} (must be 1..{MAX_THREADS}, or 0/-1 for all cores)",
        ),
        (
            -1 <= threads_draft <= MAX_THREADS,
            f"-td/--threads-draft: {threads_draft} (must be 1..{MAX_THREADS}, or 0/-1 for -t)",
        ),
        (
            flash_attn in FLASH_ATTN,
            f"-fa/--flash-attn: {flash_attn!r} ({one_of(list(FLASH_ATTN))})",
        ),
        (
            draft_sampling in DRAFT_SAMPLING_MODES,
            f"--spec-draft-sampling: {draft_sampling!r} ({one_of(DRAFT_SAMPLING_MODES)})",
        ),
        (1 <= batch <= 1 << 16, f"-b/--batch-size: {batch} (must be 1..65536)"),
    ]
    # the sampling, length and seed flags: the table requests and --jsonl lines are checked by
    sampling = {"n_predict": n_predict, "temperature": temp, "top_p": top_p, "min_p": min_p}
    if seed is not None:
        sampling["seed"] = seed
    checks[:0] = [(False, e) for k, v in sampling.items() if (e := flag_error(k, v)) is not None]
    for ok, what in checks:
        if not ok:
            raise UsageError(f"invalid value for {what}")


def read_prompt(prompt: str | None, file: Path | None, flag: str = "-f") -> str:
    """-p, else -f (or `flag`'s file), else stdin (when it is not a terminal)."""
    import sys

    from specgguf.errors import PromptError, read_bounded

    if prompt is not None:
        return prompt
    if file is not None:
        with open_user_file(file, flag) as f:
            data = read_bounded(f, f"{flag} {file}", PromptError)
        return decode_prompt(data, f"{flag} {file}")
    if sys.stdin is None or sys.stdin.isatty():
        raise PromptError("no prompt: pass -p TEXT, -f FILE, or pipe it on stdin")
    return decode_prompt(read_bounded(sys.stdin.buffer, "stdin", PromptError), "stdin")


def decode_prompt(data: bytes, where: str) -> str:
    from specgguf.errors import PromptError

    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PromptError(f"{where}: not valid UTF-8 (byte {e.start})") from None


def with_ngram_options(func):
    """Add every n-gram flag of specgguf.drafters.ngram_options.NGRAM_FLAGS to a Typer command.

    The table is the single source of the names, aliases, defaults and ranges; this replaces
    the command's `ngram` parameter by those flags and hands the command one
    `ngram: NgramOptions` argument built and validated from whatever the user gave.
    """
    from specgguf.drafters.ngram_options import NGRAM_FLAGS, NgramOptions

    params = {}
    for row in NGRAM_FLAGS:
        name = "ngram_" + row.info.flag.lstrip("-").replace("-", "_")
        is_file = row.info.metavar == "FNAME"
        params[name] = (
            row.info.flag,
            inspect.Parameter(
                name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=typer.Option(
                    None,
                    row.info.flag,
                    *row.info.aliases,
                    help=f"{row.info.help} (default: {row.default})"
                    if not is_file
                    else row.info.help,
                    metavar=row.info.metavar,
                ),
                annotation=(str | None) if is_file else (int | None),
            ),
        )

    def call(func, args, kwargs):
        flags = {flag: kwargs.pop(name) for name, (flag, _) in params.items()}
        return func(*args, ngram=NgramOptions.from_flags(flags), **kwargs)

    return _extend_signature(func, "ngram", [p for _, p in params.values()], call)


def check_lookup_caches(types, ngram) -> None:
    """With ngram-cache: -lcs readable, -lcd writable, both within the size cap, before any
    model loads (a -lcd that cannot be saved would otherwise fail after the generation)."""
    if ngram is None or "ngram-cache" not in types:
        return
    from specgguf.drafters.ngram_cache import check_cache_paths

    check_cache_paths(ngram.cache.lookup_cache_static, ngram.cache.lookup_cache_dynamic)


def draft_type_for(model_draft: Path | None) -> str:
    """The --spec-type a -md file makes when none is given (read from its header: an EAGLE-3
    head drafts as draft-eagle3, a separate MTP drafter such as a Gemma-4 assistant as
    draft-mtp, any other model as draft-simple)."""
    if model_draft is None:
        return "draft-simple"
    from specgguf.heads.eagle3_info import draft_type_of
    from specgguf.modelfiles.gguf_info import read_gguf_info

    return draft_type_of(read_gguf_info(model_draft))


def resolve_models(model: Path | None, model_draft: Path | None) -> tuple[Path, Path | None]:
    """No -m: the pulled default pair, draft included (exit 6 with a hint when not pulled)."""
    if model is not None:
        return model, model_draft
    from specgguf.modelfiles.models import require_default_pair

    target, default_draft = require_default_pair()
    return target, model_draft or default_draft


def _all_cores(threads: int) -> int:
    """-1 and 0 both mean all cores: one machine profile, not two."""
    return max(threads, 0)


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class SharedFlag:
    """One flag that `run`, `bench` and `serve` all take, declared once: the commands'
    parameter name, its Typer declaration (names, aliases, variable, default, help), its type,
    and the specgguf.loading.session.LoadOptions field it fills (None: not a loading setting,
    read from SessionFlags instead)."""

    param: str
    option: Any  # typer.models.OptionInfo
    type: Any
    load_field: str | None = None
    convert: Callable[[Any], Any] = _same

    @property
    def names(self) -> tuple[str, ...]:
        """The flag's name, then its aliases, as the command line spells them (a switch's
        "--no-x/--x" declaration is both spellings)."""
        return tuple(n for decl in self.option.param_decls for n in decl.split("/"))


#: Every flag `run`, `bench` and `serve` share for loading a model pair and drafting over it,
#: in --help order: the one source of their names, defaults and LoadOptions fields.
#: `with_session_flags` adds them to a command; docs/running.md's flag table is checked against it.
SESSION_FLAGS: tuple[SharedFlag, ...] = (
    SharedFlag("model", Model, Path | None),  # None: the pulled pair (SessionFlags.resolve)
    SharedFlag("model_draft", ModelDraft, Path | None),
    SharedFlag("hf_repo", HfRepo, str | None),  # resolved by SessionFlags.hub_models
    SharedFlag("model_url", ModelUrl, str | None),
    SharedFlag("hf_file", HfFile, str | None),
    SharedFlag("hf_repo_draft", HfRepoDraft, str | None),
    SharedFlag("hf_token", HfToken, str | None),
    SharedFlag("offline", Offline, bool),
    SharedFlag("spec_vocab_strict", SpecVocabStrict, bool, "strict_vocab"),
    SharedFlag("no_spec_text_views", NoTextViews, bool),
    SharedFlag("spec_draft_n_min", NMin, int),
    SharedFlag("spec_draft_p_min", PMin, float),
    SharedFlag("spec_draft_p_split", PSplit, float),
    SharedFlag("spec_tree_topk", TreeTopk, int | None),
    SharedFlag("spec_tree_nodes", TreeNodes, int),
    SharedFlag("spec_draft_sampling", DraftSampling, str),
    SharedFlag("n_gpu_layers", NGL, str, "n_gpu_layers"),
    SharedFlag("n_gpu_layers_draft", NGLD, str, "n_gpu_layers_draft"),
    SharedFlag("ctx_size", Ctx, int | None, "n_ctx"),
    SharedFlag("batch_size", Batch, int, "n_batch"),
    SharedFlag("flash_attn", FlashAttn, str, "flash_attn"),
    SharedFlag("threads", Threads, int, "threads", _all_cores),
    SharedFlag("threads_draft", ThreadsDraft, int, "threads_draft", _all_cores),
    SharedFlag("no_repack", NoRepack, bool, "repack", operator.not_),
    SharedFlag("rpc", Rpc, str | None, "rpc"),
    SharedFlag("device", Device, str | None, "device"),
    SharedFlag("device_draft", DeviceDraft, str | None, "device_draft"),
    SharedFlag("list_devices", ListDevices, bool),  # handled by with_session_flags
    SharedFlag("cache_list", CacheList, bool),  # handled by with_session_flags
    SharedFlag("completion_bash", CompletionBash, bool),  # handled by with_session_flags
    SharedFlag("version", Version, bool),  # handled by with_session_flags
    SharedFlag("cache_type_k", CacheTypeK, str, "cache_type_k"),
    SharedFlag("cache_type_v", CacheTypeV, str, "cache_type_v"),
    SharedFlag("cache_type_k_draft", CacheTypeKDraft, str, "cache_type_k_draft"),
    SharedFlag("cache_type_v_draft", CacheTypeVDraft, str, "cache_type_v_draft"),
    SharedFlag("verbose", Verbose, bool, "verbose"),
)
_SHARED = {row.param: row for row in SESSION_FLAGS}
#: the rows whose value is a KV cache type (checked against llama.cpp's list before loading)
_KV_ROWS = tuple(row for row in SESSION_FLAGS if row.param.startswith("cache_type_"))


def load_options(model: Path, model_draft: Path | None, /, tuning: Any = None, **given: Any):
    """specgguf.loading.session.LoadOptions for a resolved model pair from the shared flags'
    values, by parameter name (e.g. ctx_size=512); a flag not given keeps its default, and
    -m/-md as given are replaced by the resolved pair. `tuning`: the flag table's settings
    (specgguf.loading.tuning.LlamaTuning), its LoadOptions fields included."""
    from specgguf.loading.session import LoadOptions
    from specgguf.loading.tuning import LlamaTuning

    unknown = sorted(set(given) - set(_SHARED))
    if unknown:
        raise TypeError(f"not a shared flag: {', '.join(unknown)}")
    fields = {
        row.load_field: row.convert(given.get(row.param, row.option.default))
        for row in SESSION_FLAGS
        if row.load_field is not None
    }
    tuning = tuning or LlamaTuning()
    fields.update(dict(tuning.load))
    return LoadOptions(model=model, model_draft=model_draft, tuning=tuning, **fields)


@dataclass(frozen=True)
class SessionFlags:
    """The values of SESSION_FLAGS (and the n-gram options) one command was given, and the one
    way they become a Session: checked (`check`), resolved to models and spec types
    (`resolve`), then loaded (`open_session`)."""

    #: parameter name -> value, one entry per row of SESSION_FLAGS
    given: Mapping[str, Any]
    ngram: Any = None  # specgguf.drafters.ngram_options.NgramOptions
    #: the flag table's settings (cli/table_flags.py): specgguf.loading.tuning.LlamaTuning
    tuning: Any = None

    @property
    def model(self) -> Path | None:
        """-m as given (None: the pulled default pair)."""
        return self.given["model"]

    @property
    def model_draft(self) -> Path | None:
        return self.given["model_draft"]

    @property
    def verbose(self) -> bool:
        return self.given["verbose"]

    @property
    def tree_shape(self) -> TreeShape:
        """--spec-tree-topk, --spec-tree-nodes and --spec-draft-p-split as one shape (topk 0:
        not given, resolved by the mode: TreeShape.resolved)."""
        g = self.given
        topk = g["spec_tree_topk"]
        return TreeShape(topk or 0, g["spec_tree_nodes"], g["spec_draft_p_split"])

    def check(
        self,
        *,
        n_predict: int,
        temp: float,
        top_p: float,
        min_p: float,
        seed: int | None = None,
        n_max: str | None = None,
    ) -> int | None:
        """Everything that can be checked without a model, so that a typo costs nothing; with
        `n_max` (run's and serve's --spec-draft-n-max), returns it parsed (None: auto)."""
        g = self.given
        validate(
            n_predict=n_predict,
            n_min=g["spec_draft_n_min"],
            p_min=g["spec_draft_p_min"],
            p_split=g["spec_draft_p_split"],
            temp=temp,
            top_p=top_p,
            min_p=min_p,
            ctx=g["ctx_size"],
            threads=g["threads"],
            threads_draft=g["threads_draft"],
            flash_attn=g["flash_attn"],
            draft_sampling=g["spec_draft_sampling"],
            batch=g["batch_size"],
            seed=seed,
            tree_topk=g["spec_tree_topk"],
            tree_nodes=g["spec_tree_nodes"],
        )
        parsed = parse_n_max(n_max) if n_max is not None else None
        validate_cache_types(**{row.names[0]: g[row.param] for row in _KV_ROWS})
        return parsed

    def resolve(
        self, spec_type: str | None, n_max: int | None
    ) -> tuple[Path, Path | None, list[str]]:
        """The model pair (the pulled default without -m) and the chosen --spec-type list, with
        the lookup-cache files checked when ngram-cache is among them."""
        from specgguf.drafters.spec_types import parse_spec_types

        model, model_draft = resolve_models(*self.hub_models())
        types = parse_spec_types(
            spec_type,
            have_draft_model=model_draft is not None,
            auto=n_max is None,
            draft_type=draft_type_for(model_draft) if spec_type is None else "draft-simple",
        )
        check_lookup_caches(types, self.ngram)
        return model, model_draft, types

    def hub_models(self) -> tuple[Path | None, Path | None]:
        """-m and -md, with -hf/-hff and -hfd resolved to files (downloaded when the cache
        lacks them: specgguf.modelfiles.hub)."""
        g = self.given
        model, draft = g["model"], g["model_draft"]
        if g["hf_file"] and not g["hf_repo"]:
            raise UsageError("-hff/--hf-file names a file of -hf's repository: give -hf too")
        if g["hf_repo"] and model is not None:
            raise UsageError("-m and -hf both name the target model: give one of them")
        if g["hf_repo_draft"] and draft is not None:
            raise UsageError("-md and -hfd both name the draft model: give one of them")
        if g["model_url"] is not None:
            if model is not None or g["hf_repo"]:
                raise UsageError("-mu names the target model as -m and -hf do: give one")
            from specgguf.modelfiles.url_download import fetch_url

            model = fetch_url(g["model_url"], offline=g["offline"])
        if not (g["hf_repo"] or g["hf_repo_draft"]):
            return model, draft
        from specgguf.modelfiles.hub import Hub, HubModel

        hub = Hub(token=g["hf_token"], offline=g["offline"])
        if g["hf_repo"]:
            model = hub.fetch(HubModel.parse(g["hf_repo"], g["hf_file"]))
        if g["hf_repo_draft"]:
            draft = hub.fetch(HubModel.parse(g["hf_repo_draft"], flag="-hfd"))
        return model, draft

    def switched_off(self) -> frozenset[str]:
        """serve's endpoints the flag table's switches turned off (--no-webui, --no-slots)."""
        pairs = self.tuning.server if self.tuning is not None else ()
        return frozenset(handler for handler, on in pairs if not on)

    def load_options(self, model: Path, model_draft: Path | None):
        """These flags' specgguf.loading.session.LoadOptions for the resolved pair."""
        return load_options(model, model_draft, tuning=self.tuning, **self.given)

    def open_session(
        self,
        model: Path,
        model_draft: Path | None,
        types: list[str],
        n_max: int | None,
        *,
        parallel: int = 1,
        tree_room: TreeShape | None = None,
        cache_reuse: int = 0,
    ):
        """Load the pair (imports llama_cpp) for `types` at draft length `n_max` (None: auto);
        `tree_room`: the widest tree its contexts must hold, when wider than the flags' (bench's
        --sweep-tree); `cache_reuse`: serve's --cache-reuse."""
        from dataclasses import replace

        from specgguf.loading.cpu_placement import apply as place_process

        # before llama.cpp loads: libgomp reads its variables when it is loaded
        place_process(self.tuning.process if self.tuning is not None else ())
        from specgguf.generator import spec_options
        from specgguf.loading.session import Session

        g = self.given
        return Session(
            replace(self.load_options(model, model_draft), cache_reuse=cache_reuse),
            spec_options(
                types,
                n_max,
                n_min=g["spec_draft_n_min"],
                p_min=g["spec_draft_p_min"],
                draft_sampling=g["spec_draft_sampling"],
                ngram=self.ngram,
                text_views=not g["no_spec_text_views"],
                tree=self.tree_shape,
                tree_room=tree_room,
            ),
            parallel=parallel,
        )


def _extend_signature(func, slot: str | None, added: Sequence[inspect.Parameter], call):
    """`func` with its parameter `slot` replaced by `added` (None: `added` at the end; Typer
    reads `__signature__`), called as `call(func, args, kwargs)`. The original's annotations
    are evaluated in its own module, so that Typer need not resolve them in this one."""
    sig = inspect.signature(func, eval_str=True)
    params: list[inspect.Parameter] = []
    for p in sig.parameters.values():
        params.extend(added if p.name == slot else [p])
    if slot is None:
        params.extend(added)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return call(func, args, kwargs)

    wrapper.__signature__ = sig.replace(parameters=params)
    wrapper.__annotations__ = {
        p.name: p.annotation for p in params if p.annotation is not inspect.Parameter.empty
    }
    del wrapper.__wrapped__  # make Typer read the extended signature, not the original
    return wrapper


def _parameters(rows: Sequence[SharedFlag]) -> list[inspect.Parameter]:
    """The Typer parameters of a table of flags, in its order."""
    return [
        inspect.Parameter(
            row.param, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=row.option,
            annotation=row.type,
        )  # fmt: skip
        for row in rows
    ]


def with_session_flags(func):
    """Add every flag of SESSION_FLAGS and of the n-gram options to a Typer command, in place
    of its `flags` parameter, and hand it one `flags: SessionFlags` (with `flags.ngram`).

    --list-devices is answered here (the listing, exit 0) before the command runs: it needs
    no model and means the same in every command.
    """
    added = _parameters(SESSION_FLAGS)
    added.append(inspect.Parameter("ngram", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None))

    def call(func, args, kwargs):
        given = {row.param: kwargs.pop(row.param) for row in SESSION_FLAGS}
        flags = SessionFlags(given, kwargs.pop("ngram"), kwargs.pop("llama_tuning", None))
        if given["list_devices"]:
            return list_devices(given["rpc"])
        if given["version"]:
            return print_version()
        if given["cache_list"]:
            from specgguf.modelfiles.cache_list import cached_models, format_cache_list

            print(format_cache_list(cached_models()))
            return 0
        if given["completion_bash"]:  # specgguf_cli.app prints the script before parsing
            raise UsageError("--completion-bash: run it as `specgguf run --completion-bash`")
        return func(*args, flags=flags, **kwargs)

    return with_ngram_options(_extend_signature(func, "flags", added, call))


#: The flags `run` and `serve` both take for one generation, in --help order: how it speculates
#: (--spec-type, --spec-draft-n-max, --no-auto-profile), how it samples, and the grammar that
#: constrains it. `with_generation_flags` adds them to a command as one GenerationFlags.
GENERATION_FLAGS: tuple[SharedFlag, ...] = (
    SharedFlag("spec_type", SpecType, str | None),
    SharedFlag("spec_draft_n_max", NMax, str),
    SharedFlag("no_auto_profile", NoAutoProfile, bool),
    SharedFlag("n_predict", NPredict, int),
    SharedFlag("seed", Seed, int),
    # every sampler setting, from specgguf.io.sampler_table (temp, top-k, penalties, ...)
    *(SharedFlag(param, option, kind) for param, option, kind in sampler_flags.typer_rows()),
    SharedFlag("ignore_eos", IgnoreEos, bool),
    SharedFlag("grammar", gf.Grammar, str | None),
    SharedFlag("grammar_file", gf.GrammarFile, Path | None),
    SharedFlag("json_schema", gf.JsonSchema, str | None),
    SharedFlag("json_schema_file", gf.JsonSchemaFile, Path | None),
    SharedFlag("reasoning_budget", ReasoningBudget, int),
    SharedFlag("reasoning_budget_message", ReasoningBudgetMessage, str),
)


@dataclass(frozen=True)
class GenerationFlags:
    """The values of GENERATION_FLAGS one command was given, and what they become: the checked
    draft length, the Generator's sampling and speculation arguments, the output grammar."""

    spec_type: str | None
    spec_draft_n_max: str
    no_auto_profile: bool
    n_predict: int
    seed: int
    #: the sampler flags' values by parameter name (sampler_flags.PARAMS)
    sampling: dict[str, Any]
    ignore_eos: bool
    grammar: str | None
    grammar_file: Path | None
    json_schema: str | None
    json_schema_file: Path | None
    reasoning_budget: int
    reasoning_budget_message: str

    def check(self, flags: SessionFlags) -> int | None:
        """Everything these and the session's flags allow checking without a model; returns
        --spec-draft-n-max parsed (None: auto)."""
        s = self.sampling
        if self.reasoning_budget < -1:
            raise UsageError(
                f"--reasoning-budget must be -1 (unlimited), 0 (no thinking) or a number of "
                f"tokens, not {self.reasoning_budget}"
            )
        if len(self.reasoning_budget_message) > MAX_BUDGET_MESSAGE:
            raise UsageError(
                f"--reasoning-budget-message is longer than {MAX_BUDGET_MESSAGE} characters"
            )
        parsed = flags.check(
            n_predict=self.n_predict, temp=s["temp"], top_p=s["top_p"], min_p=s["min_p"],
            seed=self.seed, n_max=self.spec_draft_n_max,
        )  # fmt: skip
        self.sampler()  # the other sampler flags: one line for the first bad one
        return parsed

    def sampler(self):
        """specgguf.core.sampling.SamplerParams from the sampler flags (UsageError: one line
        naming the first flag out of range)."""
        from specgguf.core.sampling import SamplerParams
        from specgguf.io.sampler_table import SettingError, from_flags

        try:
            return SamplerParams(**from_flags(self.sampling))
        except SettingError as e:
            raise UsageError(f"invalid value for {e}") from None

    def generator_args(self, n_max: int | None) -> dict[str, Any]:
        """specgguf.generator.Generator's sampling and speculation arguments (n_max: the
        checked draft length, None for auto)."""
        return {
            "sampler": self.sampler(),
            "n_predict": self.n_predict,
            "seed": self.seed,
            "ignore_eos": self.ignore_eos,
            "auto": n_max is None,
            "profile": not self.no_auto_profile,
        }

    def thinking_budget(self, params=None):
        """`params` (GenParams; a fresh one when None) with --reasoning-budget and its message,
        for a chat answer (unlimited: unchanged)."""
        from dataclasses import replace

        from specgguf.generator import GenParams

        params = params or GenParams()
        if self.reasoning_budget < 0:
            return params
        return replace(params, reasoning_budget=self.reasoning_budget,
                       reasoning_budget_message=self.reasoning_budget_message)

    def output_grammar(self):
        """The --grammar/--grammar-file/-j/-jf constraint, or None (grammar_flags.read_grammar:
        one line, exit 1, for two at once or a schema that does not convert)."""
        return gf.read_grammar(self.grammar, self.grammar_file, self.json_schema,
                               self.json_schema_file)


def with_generation_flags(func):
    """Add every flag of GENERATION_FLAGS to a Typer command, in place of its `gen_flags`
    parameter, and hand it one `gen_flags: GenerationFlags`."""

    def call(func, args, kwargs):
        given = {row.param: kwargs.pop(row.param) for row in GENERATION_FLAGS}
        sampling = {p: given.pop(p) for p in sampler_flags.PARAMS}
        return func(*args, gen_flags=GenerationFlags(**given, sampling=sampling), **kwargs)

    return _extend_signature(func, "gen_flags", _parameters(GENERATION_FLAGS), call)


def print_version() -> int:
    """--version: llama.cpp's two lines on stderr ("version: V (build B, commit C)", "built
    with COMPILER for TARGET"), V specgguf's, B the llama-cpp-python it runs on; exits 0
    without importing llama_cpp."""
    import platform
    import sys
    from importlib import metadata

    def version_of(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    print(f"version: {version_of('specgguf')} (build llama-cpp-python "
          f"{version_of('llama-cpp-python')}, commit unknown)", file=sys.stderr)
    print(f"built with Python {platform.python_version()} for {platform.machine()}-"
          f"{platform.system().lower()}", file=sys.stderr)
    return 0


def list_devices(rpc: str | None) -> int:
    """--list-devices: llama.cpp's listing, after registering --rpc workers; exits 0."""
    from specgguf.binding import devices
    if rpc:
        devices.add_rpc_servers(rpc)
    print(devices.format_device_list())
    return 0
