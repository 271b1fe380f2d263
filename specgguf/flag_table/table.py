"""THE flag table: every flag of llama.cpp's llama-server, llama-cli and llama-completion
--help (vendored.py), plus the older spellings real scripts still carry (LEGACY), each with
its status here:

* DECLARED: an option of the specgguf command itself (cli/), with llama.cpp's meaning;
* SETTING: declared from this table and carried to a llama.cpp model or context parameter
  (or a LoadOptions field) of the target, the draft, or both;
* ALWAYS: what specgguf always does (accepted with that value; the other value is refused with
  the row's note);
* DEPRECATED: llama.cpp itself accepts it and does nothing but warn; so does specgguf;
* REFUSED: one line saying why and what to do instead, exit 1;
* REMOVED: llama.cpp removed it; refused with llama.cpp's message and the corrected command
  (specgguf.migrate.removed_flags);
* PRESET: stands for other flags (PRESETS), put in its place before the command line is read;
* DELEGATED: belongs to another family of flags (the sampler chain), declared by that
  family's own table.

Nothing is silently ignored: a flag a command does not list is an unknown option there."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Any

from specgguf.flag_table import values as v
from specgguf.flag_table.vendored import PROGRAM_COMMANDS, VendoredFlag, vendored_flags
from specgguf.forwarding import Forwarded


class Status(str, Enum):
    DECLARED = "declared"
    SETTING = "setting"
    ALWAYS = "always"
    DEPRECATED = "deprecated"
    REFUSED = "refused"
    REMOVED = "removed"
    DELEGATED = "delegated"
    PRESET = "preset"


#: where a SETTING goes: a LoadOptions field, a llama.cpp parameter of the model or of the
#: context (for the target, the draft, or both), a serve endpoint switched on or off, the
#: process's CPU placement (specgguf.loading.cpu_placement), serve's embeddings context,
#: where the logs go (specgguf.io.log_sink), serve's HTTP server (specgguf.server.http_settings),
#: serve's slots: which one a request takes, and when the idle models sleep
#: (specgguf.server.scheduler.SlotSettings), serve's router mode (specgguf.server.router),
#: or the target's LoRA adapters and control vectors (specgguf.binding.adapters)
SCOPES = ("load", "model", "context", "server", "process", "embeddings", "log", "http", "slots",
          "router", "adapters")  # fmt: skip
ROLES = ("target", "draft", "both")


@dataclass(frozen=True)
class Setting:
    scope: str  # one of SCOPES
    field: str  # the LoadOptions field or llama_model_params/llama_context_params field
    parse: v.Parser
    role: str = "both"  # one of ROLES


@dataclass(frozen=True)
class Entry:
    """What specgguf does with one flag (the part of a row that is not llama.cpp's)."""

    status: Status
    note: str  # what it does here; why it is refused; the warning; the owning family
    setting: Setting | None = None
    always: Any = None  # ALWAYS: the value accepted
    commands: frozenset[str] | None = None  # None: as llama.cpp's programs map (PROGRAM_COMMANDS)
    bare: str | None = None  # the value a bare spelling means (-fa alone: "on")
    #: DECLARED rows whose command makes its option from the row (cli.table_flags.own_option):
    #: the option's --help text (the note stays the docs table's summary)
    help: str | None = None


@dataclass(frozen=True)
class Flag:
    """One row of the table."""

    flag: VendoredFlag
    entry: Entry
    legacy: bool = False  # a spelling of an older llama.cpp, absent from the pinned --help

    key = Forwarded[str]("flag")
    status = Forwarded[Status]("entry")

    @property
    def commands(self) -> frozenset[str]:
        if self.entry.commands is not None:
            return self.entry.commands
        mapped = frozenset(PROGRAM_COMMANDS[p] for p in self.flag.programs)
        # a loading setting means the same to bench, which loads the pair too
        return mapped | {"bench"} if self.status is Status.SETTING else mapped

    @property
    def is_switch(self) -> bool:
        return not self.flag.values

    @property
    def param(self) -> str:
        """The Python name a command's parameter has for it."""
        return "llama_" + self.key.lstrip("-").replace("-", "_").replace(".", "_").replace("+", "")


def declared(note: str = "", commands: str | None = None, help: str | None = None) -> Entry:
    return Entry(Status.DECLARED, note, commands=_commands(commands), help=help)


def setting(scope: str, name: str, parse: v.Parser, note: str, role: str = "both",
            commands: str | None = None) -> Entry:  # fmt: skip
    return Entry(Status.SETTING, note, Setting(scope, name, parse, role),
                 commands=_commands(commands))  # fmt: skip


def always(value: Any, note: str, commands: str | None = None) -> Entry:
    return Entry(Status.ALWAYS, note, always=value, commands=_commands(commands))


def deprecated(warning: str) -> Entry:
    return Entry(Status.DEPRECATED, warning)


def refused(why: str, commands: str | None = None) -> Entry:
    return Entry(Status.REFUSED, why, commands=_commands(commands))


def delegated(family: str) -> Entry:
    return Entry(Status.DELEGATED, f"owned by the {family} family")


REMOVED = Entry(Status.REMOVED, "removed by llama.cpp: refused with the corrected command")


def _commands(names: str | None) -> frozenset[str] | None:
    return None if names is None else frozenset(names.split())


# -- the reasons shared by several rows -------------------------------------------------------
_MULTIMODAL = "specgguf generates from text only (no multimodal projector, images, audio or video): run llama-server for media input"  # noqa: E501
_LORA = "applied to the target's contexts, which verify every draft (the draft model drafts without it: its guesses are checked against the adapted target)"  # noqa: E501
_CVEC = "added to the target's hidden states in the layers of --control-vector-layer-range (default: all), summed over the files; the draft model drafts without it"  # noqa: E501
# llama-cpp-python exposes no llama.cpp thread pool (llama_attach_threadpool is not bound), so
# CPU placement is process-wide: every thread of the process, and the OpenMP team this build
# of llama.cpp computes with (which inherits the process's CPUs and reads its environment)
_PROCESS = "process-wide (no thread pool is bound): "
_CPUS = _PROCESS + "the process and llama.cpp's threads run on these CPUs; with the batch and draft forms, on all the CPUs named"  # noqa: E501
_STRICT = _PROCESS + "llama.cpp's OpenMP threads are each bound to one CPU in turn (OMP_PROC_BIND=close over the CPUs given)"  # noqa: E501
_PRIO = _PROCESS + "the process's nice value as llama.cpp sets it (-1: 5, 0: 0, 1: -5, 2: -10, 3: -20); the highest priority given wins; raising it needs the privilege (else a warning)"  # noqa: E501
_POLL = _PROCESS + "how long llama.cpp's OpenMP threads spin before they sleep (0: OMP_WAIT_POLICY=passive; N: GOMP_SPINCOUNT=6000*N, so 50 is libgomp's default); the most polling given wins"  # noqa: E501
_CPU_MASK = setting("process", "cpus", v.cpu_mask, _CPUS)
_CPU_RANGE = setting("process", "cpus", v.cpu_range, _CPUS)
_CPU_STRICT = setting("process", "cpu_strict", v.zero_or_one, _STRICT)
_PRIO_MAIN = setting("process", "nice", v.priority(-1), _PRIO)
_PRIO_BATCH = setting("process", "nice", v.priority(0), _PRIO)  # batch forms: 0..3
_POLL_LEVEL = setting("process", "poll", v.integer(0, 100), _POLL)
_TOOLS = "specgguf serve runs no tools or MCP servers of its own: clients call tools (the OpenAI tools API is supported)"  # noqa: E501
_JSONL = "llama.cpp's log is not written as JSON lines here: --log-file FNAME keeps it (with specgguf's own lines) as text"  # noqa: E501

SAMPLERS = "samplers"

#: what llama-server's code-completion presets (--fim-qwen-*) set, in flags: its port (the
#: plugins' default endpoint), batch and micro-batch and the model's whole context; and
#: --cache-reuse 64 where llama-server sets 256: the text after the cursor, a quarter batch
#: less the prompt and two tokens (254 tokens at most with -b 1024), is then kept as the
#: lines above it change (specgguf.core.cache_reuse), where 256 never keeps it
EDITOR_SETTINGS = ("--port", "8012", "-b", "1024", "-ub", "1024", "-c", "0",
                   "--cache-reuse", "64")  # fmt: skip


def _editor_preset(model: str) -> Entry:
    return Entry(Status.PRESET, f"llama-server's code-completion preset ({model}): "
                 + " ".join(EDITOR_SETTINGS), commands=frozenset({"serve"}))  # fmt: skip


@dataclass(frozen=True)
class ModelPreset:
    """llama-server's presets that name a model by its Hub repository (downloaded by -hf as
    any -hf is) with the settings it is served with: `settings` for every command that takes
    it, `serve` for serve alone (its port, slots). A model (-m, -hf) given on the command line
    replaces the preset's; any other flag given wins over the preset's as well."""

    repo: str
    file: str | None
    what: str
    settings: tuple[str, ...]
    serve: tuple[str, ...] = ()
    commands: tuple[str, ...] = ("run", "serve")

    @property
    def flags(self) -> tuple[str, ...]:
        """The model flags: -hf REPO and, where llama-server names one, -hff FILE."""
        return ("-hf", self.repo, *(("-hff", self.file) if self.file else ()))


#: gpt-oss: 131072 tokens per slot, two slots; sampling as its authors recommend
_GPT_OSS = ("-ub", "2048", "-b", "32768", "-c", "262144", "--temp", "1.0", "--top-p", "1.0",
            "--top-k", "0", "--min-p", "0.01", "--jinja")  # fmt: skip
MODEL_PRESETS: dict[str, ModelPreset] = {
    "--gpt-oss-20b-default": ModelPreset(
        "ggml-org/gpt-oss-20b-GGUF", "gpt-oss-20b-mxfp4.gguf", "gpt-oss-20b", _GPT_OSS,
        ("--port", "8013", "-np", "2")),
    "--gpt-oss-120b-default": ModelPreset(
        "ggml-org/gpt-oss-120b-GGUF", None, "gpt-oss-120b", _GPT_OSS,
        ("--port", "8013", "-np", "2")),
    # llama-server also prints each prompt's tokens with this preset (--verbose-prompt), which
    # specgguf serve does not: its embeddings are the same
    "--embd-gemma-default": ModelPreset(
        "ggml-org/embeddinggemma-300M-qat-q4_0-GGUF", "embeddinggemma-300M-qat-Q4_0.gguf",
        "EmbeddingGemma 300M", ("-ub", "2048", "-b", "2048", "-c", "65536", "--embedding"),
        ("--port", "8011", "-np", "32"), commands=("serve",)),
}  # fmt: skip


def _model_preset(flag: str) -> Entry:
    preset = MODEL_PRESETS[flag]
    serve = f" (serve: {' '.join(preset.serve)})" if preset.serve else ""
    return Entry(Status.PRESET, f"llama-server's {preset.what} preset: "
                 + " ".join((*preset.flags, *preset.settings)) + serve,
                 commands=frozenset(preset.commands))  # fmt: skip


#: what specgguf does with each vendored flag, by its key (VendoredFlag.key)
ENTRIES: dict[str, Entry] = {
    "--help": declared("this help"),
    "--version": declared("the version, in llama.cpp's shape"),
    "--cache-list": declared("list the models -hf downloaded (user/model:TAG, numbered), as llama.cpp does, and exit", "run serve bench"),  # noqa: E501
    "--completion-bash": declared("print a bash completion script for specgguf's commands and flags, and exit", "run serve bench"),  # noqa: E501
    "--server-base": refused("specgguf run is not a client of a running server: run it against the model with -m"),  # noqa: E501
    "--verbose-prompt": setting("load", "verbose_prompt", v.switch, "before each generation, print the prompt's text and each of its tokens (id -> 'piece') on stderr, as llama.cpp does", commands="run"),  # noqa: E501
    "--display-prompt": always(False, "the prompt is not echoed: --no-display-prompt is what specgguf run does"),  # noqa: E501
    "--color": declared("colour the tokens that came from accepted drafts (bare: on)"),
    "--threads": declared(),
    "--threads-batch": setting("context", "n_threads_batch", v.integer(1, 512), "threads for prompt processing (batches); default: as -t", "target"),  # noqa: E501
    "--cpu-mask": _CPU_MASK,
    "--cpu-range": _CPU_RANGE,
    "--cpu-strict": _CPU_STRICT,
    "--prio": _PRIO_MAIN,
    "--poll": _POLL_LEVEL,
    "--cpu-mask-batch": _CPU_MASK,
    "--cpu-range-batch": _CPU_RANGE,
    "--cpu-strict-batch": _CPU_STRICT,
    "--prio-batch": _PRIO_BATCH,
    "--poll-batch": _POLL_LEVEL,
    "--lookup-cache-static": declared("n-gram cache drafting (--spec-type ngram-cache)", "run serve bench"),  # noqa: E501
    "--lookup-cache-dynamic": declared("n-gram cache drafting (--spec-type ngram-cache)", "run serve bench"),  # noqa: E501
    "--ctx-size": declared(),
    "--kv-unified-per-slot": setting("load", "kv_unified_per_slot", v.integer(0, 1 << 24), "no slot holds more than N tokens; without -c the KV pool is -np x N (with -c, a slot's share of it, -c / -np, is cut to N; N above the share has no effect: a warning); 0: unset", commands="serve"),  # noqa: E501
    "--predict": declared(),
    "--batch-size": declared(),
    "--ubatch-size": setting("load", "n_ubatch", v.integer(1, 65536), "physical batch size (rows per pass; capped at -b)"),  # noqa: E501
    "--keep": deprecated("--keep has no effect: specgguf never shifts the context (a full context ends the generation)"),  # noqa: E501
    "--swa-full": setting("context", "swa_full", v.switch, "full-size KV cache for sliding-window attention"),  # noqa: E501
    "--ctx-checkpoints": setting("load", "ctx_checkpoints", v.integer(0, 1024), "prompt checkpoints a recurrent or hybrid model keeps per context for the next prompt to resume from (default here: 2; 0: none)"),  # noqa: E501
    "--checkpoint-min-step": setting("load", "checkpoint_min_step", v.integer(0, 1 << 24), "the fewest tokens between two prompt checkpoints (default here: 0, any)"),  # noqa: E501
    "--cache-ram": setting("load", "cache_ram", v.integer(-1, 1 << 24), "a host-memory prompt cache of the target's sequences across requests and slots, bounded by N MiB (-1: no bound; 0, the default here: none)"),  # noqa: E501
    "--kv-unified": always(True, "slots share one KV cache (it is unified whenever -np > 1): --no-kv-unified cannot be honoured"),  # noqa: E501
    "--cache-idle-slots": setting("slots", "cache_idle_slots", v.switch, "with --cache-ram and -np > 1: as a request starts, the idle slots' sequences are saved into the prompt cache, so a request in another slot can load them (on by default; without --cache-ram, a warning); they are not cleared: each slot's share of the KV cache is its own here", commands="serve"),  # noqa: E501
    "--context-shift": always(False, "specgguf never shifts the context (a full context ends the generation, as --no-context-shift): --context-shift cannot be honoured"),  # noqa: E501
    "--flash-attn": declared("flash attention: on, off or auto (bare -fa: on)"),
    "--prompt": declared(),
    "--system-prompt": declared(commands="run serve"),
    "--perf": always(False, "libllama's internal timings are off: specgguf prints its own report (--perf cannot be honoured)"),  # noqa: E501
    "--show-timings": always(True, "the report after each answer is on; -q hides it"),
    "--file": declared(),
    "--system-prompt-file": declared("the system message from a file", "run"),
    "--binary-file": refused("the prompt is UTF-8 text: use -f"),
    "--escape": declared("process escape sequences (\\n, \\t, \\\", \\\\) in -p (serve: accepted with a note, as llama-server, whose prompts come in requests, reads no escapes either)", "run serve", help="Process escape sequences (\\n, \\t, \\', \\\", \\\\) in -p before it is used (serve: no effect, its prompts come in requests)."),  # noqa: E501
    "--print-token-count": declared("a line on stderr each time the context's tokens reach a multiple of N", "run", help="Print the tokens in the context (prompt and generated) on stderr each time they reach a multiple of N (default: -1, never)."),  # noqa: E501
    "--prompt-cache": declared("a file keeping the evaluated prompt's state: a later prompt that starts the same evaluates only the rest", "run", help="A file keeping the target's evaluated prompt (its tokens and state): the next run whose prompt starts the same evaluates only the rest (exact). One prompt: not with -cnv, -i or --jsonl."),  # noqa: E501
    "--prompt-cache-all": declared("--prompt-cache keeps the generated tokens too", "run", help="With --prompt-cache: keep the generated tokens in the file too."),  # noqa: E501
    "--prompt-cache-ro": declared("--prompt-cache is read, never written", "run", help="With --prompt-cache: read the file, never write it."),  # noqa: E501
    "--reverse-prompt": declared("stop an answer at this text (with -cnv: the next turn follows)", "run"),  # noqa: E501
    "--special": setting("load", "special", v.switch, "special tokens are printed as their text (<|im_start|>, ...) in the output, where otherwise they are left out; the end-of-generation token that ends an answer is not part of the text either way (llama.cpp prints it with -sp)", commands="run serve"),  # noqa: E501
    "--conversation": declared("interactive chat", help="Interactive chat: read user turns from stdin (one per line; end a line with \\ to continue it), keep the conversation across turns. -p/-f give the first turn."),  # noqa: E501
    "--single-turn": declared("-cnv answers one turn, then exits", "run", help="With -cnv: answer the first turn (-p/-f, else the first stdin line) and exit."),  # noqa: E501
    "--interactive": declared("llama-completion's interactive mode on plain text (speculation as in every run)", "run", help="llama-completion's interactive mode on plain text: generate from -p/-f, then at a reverse prompt (-r), the end of text or -n tokens read what comes next from stdin, and go on (Ctrl-D ends)."),  # noqa: E501
    "--interactive-first": declared("-i, waiting for input first", "run", help="As -i, waiting for input before generating."),  # noqa: E501
    "--multiline-input": declared("with -i or -cnv: Enter goes on to another line", "run", help="With -i or -cnv: Enter goes on to another line; a line ending in \\ (or /) hands control back."),  # noqa: E501
    "--in-prefix-bos": declared("with -i: a BOS token before each input", "run", help="With -i: a BOS token before each input (and its prefix)."),  # noqa: E501
    "--in-prefix": declared("with -i: text before each input", "run", help="With -i: text put (and shown) before each input."),  # noqa: E501
    "--in-suffix": declared("with -i: text after each input", "run", help="With -i: text put (and shown) after each input."),  # noqa: E501
    "--warmup": setting("load", "warmup", v.switch, "one pass of each model at load, so the first request does not pay their set-up; under auto it also times what the machine profile lacks (specgguf.warmup); bench's own --warmup runs each configuration once first", commands="run serve"),  # noqa: E501
    "--spm-infill": declared("fill-in-the-middle prompts in suffix/prefix/middle order (for the models trained so)", "serve"),  # noqa: E501
    "--seed": declared(),
    "--ignore-eos": declared(),
    "--temp": declared(),
    "--top-k": declared(),
    "--top-p": declared(),
    "--min-p": declared(),
    "--grammar": declared(),
    "--grammar-file": declared(),
    "--json-schema": declared(),
    "--json-schema-file": declared(),
    "--pooling": setting("embeddings", "pooling", v.choice(v.POOLING), "the embeddings' pooling: none (a vector per token: /embedding only), mean, cls, last or rank (a reranker's scores: /rerank, as --rerank); default: the model's own", commands="serve"),  # noqa: E501
    "--rope-scaling": setting("context", "rope_scaling_type", v.choice(v.ROPE_SCALING), "RoPE frequency scaling: none, linear or yarn"),  # noqa: E501
    "--rope-scale": setting("context", "rope_freq_scale", v.reciprocal(1e-3, 1e3), "RoPE context scaling factor (the context is stretched N times)"),  # noqa: E501
    "--rope-freq-base": setting("context", "rope_freq_base", v.real(0.0, 1e12), "RoPE base frequency"),  # noqa: E501
    "--rope-freq-scale": setting("context", "rope_freq_scale", v.real(1e-6, 1e3), "RoPE frequency scaling factor"),  # noqa: E501
    "--yarn-orig-ctx": setting("context", "yarn_orig_ctx", v.integer(0, 1 << 24), "YaRN: the model's original context size"),  # noqa: E501
    "--yarn-ext-factor": setting("context", "yarn_ext_factor", v.real(-1.0, 100.0), "YaRN: extrapolation mix factor"),  # noqa: E501
    "--yarn-attn-factor": setting("context", "yarn_attn_factor", v.real(-1.0, 100.0), "YaRN: attention magnitude scale"),  # noqa: E501
    "--yarn-beta-slow": setting("context", "yarn_beta_slow", v.real(-1.0, 1000.0), "YaRN: high correction dim"),  # noqa: E501
    "--yarn-beta-fast": setting("context", "yarn_beta_fast", v.real(-1.0, 1000.0), "YaRN: low correction dim"),  # noqa: E501
    "--grp-attn-n": refused("self-extend (group attention) is not implemented: use --rope-scaling yarn"),  # noqa: E501
    "--grp-attn-w": refused("self-extend (group attention) is not implemented: use --rope-scaling yarn"),  # noqa: E501
    "--kv-offload": setting("context", "offload_kqv", v.switch, "keep the KV cache on the GPU (-nkvo: in host memory)"),  # noqa: E501
    "--repack": declared("weight repacking (-nr: off)"),
    "--no-host": setting("model", "no_host", v.switch, "bypass host buffers for the weights"),
    "--cache-type-k": declared(),
    "--cache-type-v": declared(),
    "--defrag-thold": deprecated("--defrag-thold is deprecated and no longer needed: the KV cache defragments itself"),  # noqa: E501
    "--parallel": declared("slots", "serve"),
    "--cont-batching": always(True, "continuous batching is always on in specgguf serve: --no-cont-batching cannot be honoured"),  # noqa: E501
    "--mmproj": refused(_MULTIMODAL),
    "--mmproj-url": refused(_MULTIMODAL),
    "--mmproj-auto": always(False, "no multimodal projector is ever loaded (--no-mmproj is what specgguf does)"),  # noqa: E501
    "--mmproj-offload": refused(_MULTIMODAL),
    "--mmproj-device": refused(_MULTIMODAL),
    "--image": refused(_MULTIMODAL),
    "--image-min-tokens": refused(_MULTIMODAL),
    "--image-max-tokens": refused(_MULTIMODAL),
    "--mtmd-batch-max-tokens": refused(_MULTIMODAL),
    "--video-fps": refused(_MULTIMODAL),
    "--video-timestamp-interval": refused(_MULTIMODAL),
    "--video-ffmpeg-dir": refused(_MULTIMODAL),
    "--rpc": declared(),
    "--load-mode": setting("model", "load_mode", v.choice(v.LOAD_MODES), "how the weights are read: auto, none, mmap, mlock, mmap+mlock or dio"),  # noqa: E501
    "--lazy-mode": setting("model", "lazy_mode", v.choice(v.LAZY_MODES), "on-demand reading of large per-layer tensors: off, auto or on"),  # noqa: E501
    "--numa": setting("process", "numa", v.choice(v.NUMA), "NUMA placement, by llama_numa_init before loading: distribute, isolate or numactl (process-wide)"),  # noqa: E501
    "--device": declared(),
    "--list-devices": declared(),
    "--override-tensor": setting("model", "tensor_buft_overrides", v.tensor_overrides, "put the tensors matching each pattern in a buffer type (e.g. exps=CPU)", "target"),  # noqa: E501
    "--cpu-moe": setting("model", "tensor_buft_overrides", v.all_on_cpu(v.FFN_EXPERTS), "keep every Mixture-of-Experts weight on the CPU", "target"),  # noqa: E501
    "--n-cpu-moe": setting("model", "tensor_buft_overrides", v.first_layers_on_cpu(v.FFN_EXPERTS), "keep the first N layers' expert weights on the CPU", "target"),  # noqa: E501
    "--n-cpu-ffn": setting("model", "tensor_buft_overrides", v.first_layers_on_cpu(v.FFN_DENSE), "keep the first N layers' dense FFN weights on the CPU", "target"),  # noqa: E501
    "--gpu-layers": declared(),
    "--split-mode": setting("model", "split_mode", v.choice(v.SPLIT_MODES), "how a model is split across GPUs: none, layer, row or tensor", "target"),  # noqa: E501
    "--tensor-split": setting("model", "tensor_split", v.fractions, "each GPU's share of the model, e.g. 3,1", "target"),  # noqa: E501
    "--main-gpu": setting("model", "main_gpu", v.integer(0, 63), "the GPU for the whole model (-sm none) or for intermediate results (-sm row)", "target"),  # noqa: E501
    "--fit": always("off", "llama.cpp's automatic fitting is not run: specgguf checks -c against memory and offloads -ngl layers (-fit on cannot be honoured)"),  # noqa: E501
    "--fit-target": refused("llama.cpp's automatic fitting is not run: set -ngl and -c"),
    "--fit-ctx": refused("llama.cpp's automatic fitting is not run: set -ngl and -c"),
    "--check-tensors": setting("model", "check_tensors", v.switch, "check the weights for invalid values while loading"),  # noqa: E501
    "--override-kv": setting("model", "kv_overrides", v.kv_overrides, "the target's metadata as llama.cpp reads it at load, key by key (types int, float, bool, str; comma-separated; llama.cpp has no draft form)", "target"),  # noqa: E501
    "--op-offload": setting("context", "op_offload", v.switch, "offload host-buffer operations to the device"),  # noqa: E501
    "--lora": setting("adapters", "loras", v.scaled_files(1.0), "LoRA adapters (GGUF, comma-separated) at scale 1: " + _LORA),  # noqa: E501
    "--lora-scaled": setting("adapters", "loras", v.scaled_files(None), "LoRA adapters at their own scales (FNAME:SCALE, comma-separated): " + _LORA),  # noqa: E501
    "--control-vector": setting("adapters", "control_vectors", v.scaled_files(1.0), "control vectors (GGUF, comma-separated) at strength 1: " + _CVEC),  # noqa: E501
    "--control-vector-scaled": setting("adapters", "control_vectors", v.scaled_files(None), "control vectors at their own strengths (FNAME:SCALE, comma-separated): " + _CVEC),  # noqa: E501
    "--control-vector-layer-range": setting("adapters", "control_vector_layers", v.layer_range, "the first and last layer (both included) the control vectors are added to (0 or less: the first / the last)"),  # noqa: E501
    "--alias": declared(commands="serve"),
    "--tags": declared(commands="serve"),
    "--model": declared(),
    "--model-url": declared("the target downloaded from an address into llama.cpp's cache (resumable, with a progress bar) unless it is there; instead of -m", "run serve bench"),  # noqa: E501
    "--docker-repo": refused("models are not pulled from Docker Hub: download the GGUF and pass it with -m"),  # noqa: E501
    "--hf-repo": declared("models by name (Hugging Face Hub)", "run serve bench"),
    "--hf-file": declared("models by name (Hugging Face Hub)", "run serve bench"),
    "--hf-token": declared("models by name (Hugging Face Hub)", "run serve bench"),
    "--output": setting("load", "transcript", v.path, "write the conversation to this file as it goes, as llama-cli does (User: and Assistant: turns, the thinking between [Start thinking] and [End thinking]); with -cnv or a chat prompt", commands="run"),  # noqa: E501
    "--embd-normalize": setting("embeddings", "normalize", v.integer(-1, 64), "how pooled embeddings are normalized: -1 none, 0 max absolute (int16 range), 1 taxicab, 2 euclidean (the default), p > 2 p-norm; a request's embd_normalize wins", commands="serve"),  # noqa: E501
    "--host": declared(),
    "--port": declared(),
    "--reuse-port": setting("http", "reuse_port", v.switch, "bind the listening socket with SO_REUSEPORT: several servers (each with this flag) listen on one port, the kernel spreading connections between them", commands="serve"),  # noqa: E501
    "--path": setting("http", "static_path", v.path, "serve the files of this directory at / (its index.html in place of the chat page; the endpoints first; not with --no-webui)", commands="serve"),  # noqa: E501
    "--cors-origins": setting("http", "cors_origins", v.text, "CORS: the origins allowed, a comma list; * (the default once a --cors-* flag is given) or localhost (a loopback Origin only); without any --cors-* flag no CORS answer is sent", commands="serve"),  # noqa: E501
    "--cors-methods": setting("http", "cors_methods", v.text, "CORS: the methods allowed, a comma list (default: GET, POST, DELETE, OPTIONS)", commands="serve"),  # noqa: E501
    "--cors-headers": setting("http", "cors_headers", v.text, "CORS: the request headers allowed, a comma list (default: *)", commands="serve"),  # noqa: E501
    "--cors-credentials": setting("http", "cors_credentials", v.switch, "CORS: credentials allowed (the default; with origins *, the request's Origin is echoed)", commands="serve"),  # noqa: E501
    "--api-prefix": setting("http", "api_prefix", v.path_prefix, "serve every endpoint and the page under this path (e.g. /llm: /llm/v1/chat/completions); other paths are 404", commands="serve"),  # noqa: E501
    "--ui-config": refused("the chat page at / has no configuration"),
    "--ui-config-file": refused("the chat page at / has no configuration"),
    "--ui-mcp-proxy": refused(_TOOLS),
    "--tools": refused(_TOOLS),
    "--tools-runtime": refused(_TOOLS),
    "--mcp-servers-config": refused(_TOOLS),
    "--mcp-servers-json": refused(_TOOLS),
    "--agent": refused(_TOOLS),
    "--ui": setting("server", "page", v.switch, "the chat page at / (--no-webui: not served)", commands="serve"),  # noqa: E501
    "--embedding": setting("embeddings", "on", v.switch, "serve /v1/embeddings and /embedding from the target, in a context of their own beside the generation's (its KV cache holds one input: min(-c per slot, -b) tokens)", commands="serve"),  # noqa: E501
    "--rerank": setting("embeddings", "rank", v.switch, "serve /rerank (/reranking, /v1/rerank, /v1/reranking): documents scored against a query by a reranker model (one with a classifier head: refused at start otherwise), in the embeddings context pooling by rank; as --embedding --pooling rank", commands="serve"),  # noqa: E501
    "--api-key": declared(),
    "--api-key-file": setting("http", "api_key_file", v.path, "more API keys, one a line (lines starting with # and empty ones skipped; up to 1 MiB), with --api-key's", commands="serve"),  # noqa: E501
    "--ssl-key-file": setting("http", "ssl_key_file", v.path, "the PEM private key of --ssl-cert-file: with both, serve speaks HTTPS only", commands="serve"),  # noqa: E501
    "--ssl-cert-file": setting("http", "ssl_cert_file", v.path, "the PEM certificate (chain) served over HTTPS, with --ssl-key-file", commands="serve"),  # noqa: E501
    "--timeout": declared(),
    "--sse-ping-interval": setting("http", "sse_ping_interval", v.integer(-1, 86400), "a streamed answer silent N seconds (a long prompt's evaluation, a wait for a slot) gets an SSE comment line, which clients skip (default: 30; -1 or 0: none); a request's sse_ping_interval wins", commands="serve"),  # noqa: E501
    "--threads-http": setting("http", "threads_http", v.integer(-1, 1024), "threads for the HTTP server's blocking work (the event loop's thread pool: static files, synchronous handlers); below 1: the pool's default, 40 (generation runs on a thread of its own either way)", commands="serve"),  # noqa: E501
    "--cache-prompt": always(True, "each slot always reuses the prefix its KV cache holds: --no-cache-prompt cannot be honoured"),  # noqa: E501
    "--cache-reuse": declared("keep cached chunks of at least N tokens that a new prompt repeats further along, shifted (0: the common prefix only; one slot)", "serve"),  # noqa: E501
    "--metrics": always(True, "/metrics is always served"),
    "--props": always(True, "/props is always served (read only)"),
    "--slots": setting("server", "slots", v.switch, "the /slots endpoint (on by default here; --no-slots: not served)", commands="serve"),  # noqa: E501
    "--slot-save-path": setting("slots", "save_path", v.path, "a directory (it must exist) for POST /slots/{id}?action=save|restore|erase: a slot's KV cache and tokens saved to a file there by name, restored, or erased (laid out as llama-server's); one --api-key at most", commands="serve"),  # noqa: E501
    "--media-path": refused(_MULTIMODAL),
    "--models-dir": setting("router", "dir", v.path, "router mode: serve this directory's GGUFs by name (a request's model field, ?model= for GET), each in a serve of its own loaded on demand; GET /models, POST /models/load and /models/unload (not with -m)", commands="serve"),  # noqa: E501
    "--models-preset": setting("router", "preset", v.path, "router mode: llama-server's INI file of model presets ([NAME] sections of flag = value, [*] for every model; a section not of --models-dir names its model or hf-repo; load-on-startup, stop-timeout, alias); the command line's flags win over a preset's (read at start: an unknown or refused key is one line, exit 1)", commands="serve"),  # noqa: E501
    "--models-max": setting("router", "max", v.integer(0, 1024), "router mode: models loaded at once; the least recently used idle one is stopped to load another (default: 4; 0: no bound)", commands="serve"),  # noqa: E501
    "--models-autoload": setting("router", "autoload", v.switch, "router mode: a request for a model not loaded loads it (the default; --no-models-autoload: 400 until POST /models/load; a request's ?autoload= wins)", commands="serve"),  # noqa: E501
    "--jinja": always(True, "chat templates are always rendered with Jinja, in a sandbox (a built-in template's name is a bundled Jinja template): --no-jinja, llama.cpp's older C++ formatters, cannot be honoured"),  # noqa: E501
    "--reasoning-format": declared("how a chat answer's thinking is returned: none, deepseek or auto", "serve"),  # noqa: E501
    "--reasoning": declared("whether thinking models think (the template's enable_thinking): on, off or auto", "serve"),  # noqa: E501
    "--reasoning-effort": declared("the reasoning_effort the chat template is given (default: the template's own)", "serve"),  # noqa: E501
    "--reasoning-budget": declared("a chat answer's thinking closed after N tokens"),
    "--reasoning-budget-message": declared("text forced before the closing of the thinking"),
    "--reasoning-preserve": declared("earlier turns keep their reasoning, for the templates that can (the template kwarg preserve_reasoning)", "serve"),  # noqa: E501
    "--chat-template": declared("a Jinja chat template, or a built-in template's name (chatml, llama3, mistral-v7, ...)", "run serve"),  # noqa: E501
    "--chat-template-kwargs": declared("extra variables for the chat template, a JSON object", "serve"),  # noqa: E501
    "--chat-template-file": declared(commands="run serve"),
    "--skip-chat-parsing": declared("a chat answer is all content: no reasoning or tool calls read out of it", "serve"),  # noqa: E501
    "--prefill-assistant": declared("a last assistant message is continued (--no-prefill-assistant: a whole message)", "serve"),  # noqa: E501
    "--slot-prompt-similarity": setting("slots", "prompt_similarity", v.real(0.0, 1.0), "a request takes the free slot whose cached prompt shares the longest prefix with its own, if that prefix is more than this fraction of its prompt; else the least recently used free slot (default: 0.10; 0: always the least recently used)", commands="serve"),  # noqa: E501
    "--lora-init-without-apply": setting("adapters", "init_without_apply", v.switch, "the LoRA adapters are loaded at scale 0; serve's POST /lora-adapters sets their scales", commands="serve"),  # noqa: E501
    "--sleep-idle-seconds": setting("slots", "sleep_idle_seconds", v.idle_seconds, "after N seconds with no request, the models and their KV caches are freed (/health and /props say is_sleeping) and loaded again for the next request, which waits for them (default: -1, never)", commands="serve"),  # noqa: E501
    "--simple-io": always(True, "input and output are plain streams (no console tricks)"),
    "--log-disable": setting("log", "disabled", v.switch, "llama.cpp's log goes nowhere, even with -v or --log-file (specgguf's own lines stay: -q hides its report)"),  # noqa: E501
    "--log-file": setting("log", "file", v.path, "append llama.cpp's log (at -lv, else info) and everything specgguf writes to stderr to this file, without colours"),  # noqa: E501
    "--log-jsonl": refused(_JSONL),  # noqa: E501
    "--log-prompts-dir": refused("prompts are not written to a directory: --trace FILE writes every round's tokens"),  # noqa: E501
    "--log-colors": setting("log", "colors", v.choice(v.COLOUR_WORDS), "colour llama.cpp's log lines on stderr by level: on, off or auto (a terminal)"),  # noqa: E501
    "--verbose": declared("show llama.cpp's own log"),
    "--offline": declared("models by name (Hugging Face Hub)", "run serve bench"),
    "--verbosity": setting("log", "verbosity", v.integer(0, 1 << 30), "llama.cpp's log on stderr: its lines count as verbosity 3, its debug lines 5 (-v: all; unset: none)"),  # noqa: E501
    "--log-prefix": setting("log", "prefix", v.switch, "start each llama.cpp log line with its level letter (I, W, E, D)"),  # noqa: E501
    "--log-timestamps": setting("log", "timestamps", v.switch, "with --log-prefix, the time since start (minutes.seconds.ms.us) before the letter"),  # noqa: E501
    "--spec-draft-hf": declared("models by name (Hugging Face Hub)", "run serve bench"),
    "--spec-draft-threads": declared(),
    "--spec-draft-threads-batch": setting("context", "n_threads_batch", v.integer(1, 512), "the draft's threads for batches; default: as -td", "draft"),  # noqa: E501
    "--spec-draft-cpu-mask": _CPU_MASK,
    "--spec-draft-cpu-range": _CPU_RANGE,
    "--spec-draft-cpu-strict": _CPU_STRICT,
    "--spec-draft-prio": _PRIO_MAIN,
    "--spec-draft-poll": _POLL_LEVEL,
    "--spec-draft-cpu-mask-batch": _CPU_MASK,
    "--spec-draft-cpu-strict-batch": _CPU_STRICT,
    "--spec-draft-prio-batch": _PRIO_BATCH,
    "--spec-draft-poll-batch": _POLL_LEVEL,
    "--spec-draft-type-k": declared(commands="run serve bench"),
    "--spec-draft-type-v": declared(commands="run serve bench"),
    "--spec-draft-override-tensor": setting("model", "tensor_buft_overrides", v.tensor_overrides, "the draft's -ot", "draft"),  # noqa: E501
    "--spec-draft-cpu-moe": setting("model", "tensor_buft_overrides", v.all_on_cpu(v.FFN_EXPERTS), "the draft's -cmoe", "draft"),  # noqa: E501
    "--spec-draft-n-cpu-moe": setting("model", "tensor_buft_overrides", v.first_layers_on_cpu(v.FFN_EXPERTS), "the draft's -ncmoe", "draft"),  # noqa: E501
    "--spec-draft-n-max": declared(),
    "--spec-draft-n-min": declared(),
    "--spec-synth-len": refused("synthetic drafts (a test of the verifier) are not offered: --spec-type none measures plain decoding"),  # noqa: E501
    "--spec-synth-rates": refused("synthetic drafts (a test of the verifier) are not offered"),
    "--spec-draft-p-split": declared(),
    "--spec-draft-p-min": declared(),
    "--spec-draft-backend-sampling": always(False, "drafts are sampled on the CPU by specgguf's own sampler (--spec-draft-backend-sampling cannot be honoured)"),  # noqa: E501
    "--spec-draft-device": declared(),
    "--spec-draft-ngl": declared(),
    "--spec-draft-model": declared(),
    "--spec-type": declared(),
    "--spec-ngram-mod-n-min": declared(commands="run serve bench"),
    "--spec-ngram-mod-n-max": declared(commands="run serve bench"),
    "--spec-ngram-mod-n-match": declared(commands="run serve bench"),
    # the lengths of each key-value n-gram type (specgguf.drafters.ngram_params)
    **{f"--spec-ngram-{kind}-{length}": declared(commands="run serve bench")
       for kind in ("simple", "map-k", "map-k4v") for length in ("size-n", "size-m", "min-hits")},
    "--draft": REMOVED,
    "--draft-min": REMOVED,
    "--spec-ngram-size-n": REMOVED,
    "--spec-ngram-size-m": REMOVED,
    "--spec-ngram-min-hits": REMOVED,
    "--embd-gemma-default": _model_preset("--embd-gemma-default"),
    "--fim-qwen-1.5b-default": _editor_preset("Qwen2.5-Coder 1.5B: the pulled pair"),
    "--fim-qwen-3b-default": _editor_preset("Qwen2.5-Coder 3B, given with -m"),
    "--fim-qwen-7b-default": _editor_preset("Qwen2.5-Coder 7B, given with -m"),
    "--fim-qwen-7b-spec": _editor_preset("Qwen2.5-Coder 7B with the 0.5B draft, given with -m and -md"),  # noqa: E501
    "--fim-qwen-14b-spec": _editor_preset("Qwen2.5-Coder 14B with the 0.5B draft, given with -m and -md"),  # noqa: E501
    "--fim-qwen-30b-default": _editor_preset("Qwen3-Coder 30B-A3B, given with -m"),
    "--gpt-oss-20b-default": _model_preset("--gpt-oss-20b-default"),
    "--gpt-oss-120b-default": _model_preset("--gpt-oss-120b-default"),
    "--vision-gemma-4b-default": refused(_MULTIMODAL),
    "--vision-gemma-12b-default": refused(_MULTIMODAL),
    "--spec-default": Entry(Status.PRESET, "llama-server's default speculation: ngram-mod (n-match 24, n-min 48, n-max 64) added to the spec types; with a draft model (-md, -hfd, or no -m: the pulled pair) draft-simple too"),  # noqa: E501
}

#: spellings of older llama.cpp releases that real command lines still carry, absent from the
#: pinned --help: each is a row of its own (spellings, value form, variable, programs)
LEGACY: tuple[tuple[VendoredFlag, Entry], ...] = (
    (
        VendoredFlag(("--mlock",), (), (), None, "LLAMA_ARG_MLOCK",
                     ("llama-server", "llama-cli", "llama-completion"), False,
                     "keep the model in RAM (older spelling of -lm mmap+mlock)"),
        setting("model", "load_mode", lambda _: v.LOAD_MODES["mmap+mlock"],
                "keep the weights in RAM (as -lm mmap+mlock)"),
    ),
    (
        VendoredFlag(("--mmap",), ("--no-mmap",), (), None, "LLAMA_ARG_MMAP",
                     ("llama-server", "llama-cli", "llama-completion"), False,
                     "memory-map the model (older spelling of -lm mmap / -lm none)"),
        setting("model", "load_mode", lambda on: v.LOAD_MODES["mmap" if on else "none"],
                "memory-map the weights (--no-mmap: read them into memory, as -lm none)"),
    ),
)

#: what each PRESET row stands for: the spec types it adds, and the flags it sets
PRESETS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "--spec-default": (
        ("ngram-mod",),
        ("--spec-ngram-mod-n-match", "24", "--spec-ngram-mod-n-min", "48",
         "--spec-ngram-mod-n-max", "64"),
    ),
}

#: the flags whose bare spelling stands for a value: older llama.cpp took them as switches
BARE_VALUES = {"--flash-attn": "on", "--color": "on"}


def entry_of(flag: VendoredFlag) -> Entry | None:
    """A vendored flag's entry: its own, else, for the flags llama.cpp lists under "sampling
    params", the sampler-chain family's."""
    entry = ENTRIES.get(flag.key)
    if entry is None and flag.sampling:
        return delegated(SAMPLERS)
    return entry


@cache
def flag_table() -> tuple[Flag, ...]:
    """Every row: the vendored flags that have an entry, in --help order, then LEGACY.
    (A vendored flag without an entry is a gap tests/test_flag_table.py reports.)"""
    rows = [Flag(f, e) for f in vendored_flags() if (e := entry_of(f)) is not None]
    rows += [Flag(f, e, legacy=True) for f, e in LEGACY]
    return tuple(rows)


def rows_for(command: str, *statuses: Status) -> tuple[Flag, ...]:
    """The rows `command` (run, serve, bench) takes, of the given statuses."""
    return tuple(r for r in flag_table() if command in r.commands and r.status in statuses)


def row_of(spelling: str) -> Flag | None:
    """The row a spelling (or negative spelling) belongs to."""
    for row in flag_table():
        if spelling in row.flag.spellings or spelling in row.flag.negative:
            return row
    return None
