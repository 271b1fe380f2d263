"""Every flag of the pinned llama.cpp's llama-server, llama-cli and llama-completion --help
(the checked-in specgguf/flag_table/llama_cpp_help.json, generated from llama.cpp's sources by
scripts/llama_help_flags.py) has a row, and the command of each row does what the row says:
takes it and carries it to its setting, accepts it as what specgguf always does, warns, or
refuses it in one line (exit 1). No model is loaded: the session is stopped where it would
load, with the LoadOptions the flags made."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import pytest
from load_stop import Loaded, stop_at_load
from specgguf_cli import options as o
from specgguf_cli.app import command as cli_group
from specgguf_cli.app import run_cli
from specgguf_cli.table_flags import expand_presets, with_bare_values

from specgguf.errors import SpecggufError
from specgguf.flag_table import values as v
from specgguf.flag_table.table import Status, entry_of, flag_table
from specgguf.flag_table.vendored import vendored_flags
from specgguf.loading.tuning import FLAT_SCOPES
from specgguf.server.http_settings import HttpSettings

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ("run", "serve", "bench")
KEY_FILE = ROOT / "tests" / "data" / "api-keys.txt"

#: a value for each SETTING row and where it must arrive: (scope.role, field, value)
SAMPLES = {
    "--threads-batch": ("3", "context.target", "n_threads_batch", 3),
    "--ubatch-size": ("64", "load", "n_ubatch", 64),
    "--warmup": (None, "load", "warmup", True),
    "--swa-full": (None, "context.both", "swa_full", True),
    "--rope-scaling": ("yarn", "context.both", "rope_scaling_type", 2),
    "--rope-scale": ("4", "context.both", "rope_freq_scale", 0.25),
    "--rope-freq-base": ("50000", "context.both", "rope_freq_base", 50000.0),
    "--rope-freq-scale": ("0.5", "context.both", "rope_freq_scale", 0.5),
    "--yarn-orig-ctx": ("4096", "context.both", "yarn_orig_ctx", 4096),
    "--yarn-ext-factor": ("0.5", "context.both", "yarn_ext_factor", 0.5),
    "--yarn-attn-factor": ("1.5", "context.both", "yarn_attn_factor", 1.5),
    "--yarn-beta-slow": ("2", "context.both", "yarn_beta_slow", 2.0),
    "--yarn-beta-fast": ("16", "context.both", "yarn_beta_fast", 16.0),
    "--kv-offload": (None, "context.both", "offload_kqv", True),
    "--no-host": (None, "model.both", "no_host", True),
    "--load-mode": ("mlock", "model.both", "load_mode", v.LOAD_MODES["mlock"]),
    "--lazy-mode": ("off", "model.both", "lazy_mode", v.LAZY_MODES["off"]),
    "--split-mode": ("row", "model.target", "split_mode", v.SPLIT_MODES["row"]),
    "--tensor-split": ("3,1", "model.target", "tensor_split", (3.0, 1.0)),
    "--main-gpu": ("1", "model.target", "main_gpu", 1),
    "--check-tensors": (None, "model.both", "check_tensors", True),
    "--op-offload": (None, "context.both", "op_offload", True),
    "--spec-draft-threads-batch": ("2", "context.draft", "n_threads_batch", 2),
    "--mlock": (None, "model.both", "load_mode", v.LOAD_MODES["mmap+mlock"]),
    "--mmap": (None, "model.both", "load_mode", v.LOAD_MODES["mmap"]),
    "--ui": (None, "server", "page", True),
    "--override-tensor": ("exps=CPU,attn=CPU", "model.target", "tensor_buft_overrides",
                          (("exps", "CPU"), ("attn", "CPU"))),
    "--cpu-moe": (None, "model.target", "tensor_buft_overrides", ((v.FFN_EXPERTS, "CPU"),)),
    "--n-cpu-moe": ("2", "model.target", "tensor_buft_overrides",
                    tuple((rf"blk\.{i}{v.FFN_EXPERTS}", "CPU") for i in range(2))),
    "--n-cpu-ffn": ("1", "model.target", "tensor_buft_overrides",
                    ((rf"blk\.0{v.FFN_DENSE}", "CPU"),)),
    "--spec-draft-override-tensor": ("exps=CPU", "model.draft", "tensor_buft_overrides",
                                     (("exps", "CPU"),)),
    "--spec-draft-cpu-moe": (None, "model.draft", "tensor_buft_overrides",
                             ((v.FFN_EXPERTS, "CPU"),)),
    "--spec-draft-n-cpu-moe": ("1", "model.draft", "tensor_buft_overrides",
                               ((rf"blk\.0{v.FFN_EXPERTS}", "CPU"),)),
    "--slots": (None, "server", "slots", True),
    "--cpu-mask": ("0x5", "process", "cpus", frozenset({0, 2})),
    "--cpu-range": ("1-3", "process", "cpus", frozenset({1, 2, 3})),
    "--cpu-strict": ("1", "process", "cpu_strict", True),
    "--prio": ("-1", "process", "nice", 5),
    "--poll": ("0", "process", "poll", 0),
    "--cpu-mask-batch": ("0x2", "process", "cpus", frozenset({1})),
    "--cpu-range-batch": ("-1", "process", "cpus", frozenset({0, 1})),
    "--cpu-strict-batch": ("1", "process", "cpu_strict", True),
    "--prio-batch": ("2", "process", "nice", -10),
    "--poll-batch": ("100", "process", "poll", 100),
    "--spec-draft-cpu-mask": ("0x1", "process", "cpus", frozenset({0})),
    "--spec-draft-cpu-range": ("0-0", "process", "cpus", frozenset({0})),
    "--spec-draft-cpu-strict": ("1", "process", "cpu_strict", True),
    "--spec-draft-prio": ("1", "process", "nice", -5),
    "--spec-draft-poll": ("20", "process", "poll", 20),
    "--spec-draft-cpu-mask-batch": ("0x1", "process", "cpus", frozenset({0})),
    "--spec-draft-cpu-strict-batch": ("1", "process", "cpu_strict", True),
    "--spec-draft-prio-batch": ("3", "process", "nice", -20),
    "--spec-draft-poll-batch": ("0", "process", "poll", 0),
    "--numa": ("isolate", "process", "numa", 2),
    "--embedding": (None, "embeddings", "on", True),
    "--pooling": ("mean", "embeddings", "pooling", 1),
    "--rerank": (None, "embeddings", "rank", True),
    "--embd-normalize": ("-1", "embeddings", "normalize", -1),
    "--cache-ram": ("64", "load", "cache_ram", 64),
    "--kv-unified-per-slot": ("128", "load", "kv_unified_per_slot", 128),
    "--ctx-checkpoints": ("8", "load", "ctx_checkpoints", 8),
    "--checkpoint-min-step": ("256", "load", "checkpoint_min_step", 256),
    "--log-disable": (None, "log", "disabled", True),
    "--log-file": (os.devnull, "log", "file", Path(os.devnull)),
    "--log-colors": ("enabled", "log", "colors", "on"),
    "--verbosity": ("4", "log", "verbosity", 4),
    "--log-prefix": (None, "log", "prefix", True),
    "--log-timestamps": (None, "log", "timestamps", True),
    "--threads-http": ("3", "http", "threads_http", 3),
    "--api-key-file": (str(KEY_FILE), "http", "api_key_file", KEY_FILE),
    "--ssl-key-file": ("key.pem", "http", "ssl_key_file", Path("key.pem")),
    "--ssl-cert-file": ("cert.pem", "http", "ssl_cert_file", Path("cert.pem")),
    "--cors-origins": ("localhost", "http", "cors_origins", "localhost"),
    "--cors-methods": ("GET, POST", "http", "cors_methods", "GET, POST"),
    "--cors-headers": ("*", "http", "cors_headers", "*"),
    "--cors-credentials": (None, "http", "cors_credentials", True),
    "--api-prefix": ("/llm", "http", "api_prefix", "/llm"),
    "--path": (str(ROOT / "docs"), "http", "static_path", ROOT / "docs"),
    "--sse-ping-interval": ("5", "http", "sse_ping_interval", 5),
    "--slot-prompt-similarity": ("0.5", "slots", "prompt_similarity", 0.5),
    "--sleep-idle-seconds": ("60", "slots", "sleep_idle_seconds", 60),
    "--slot-save-path": (str(ROOT / "docs"), "slots", "save_path", ROOT / "docs"),
    "--cache-idle-slots": (None, "slots", "cache_idle_slots", True),
    "--reuse-port": (None, "http", "reuse_port", True),
    "--lora-init-without-apply": (None, "adapters", "init_without_apply", True),
    "--models-dir": (str(ROOT / "docs"), "router", "dir", ROOT / "docs"),
    "--models-max": ("2", "router", "max", 2),
    "--models-preset": (os.devnull, "router", "preset", Path(os.devnull)),
    "--models-autoload": (None, "router", "autoload", True),
    "--override-kv": ("a.b=int:2,c=bool:false", "model.target", "kv_overrides",
                      (("a.b", 0, 2), ("c", 2, False))),
    "--lora": ("a.gguf,b.gguf", "adapters", "loras",
               ((Path("a.gguf"), 1.0), (Path("b.gguf"), 1.0))),
    "--lora-scaled": ("a.gguf:0.5", "adapters", "loras", ((Path("a.gguf"), 0.5),)),
    "--control-vector": ("c.gguf", "adapters", "control_vectors", ((Path("c.gguf"), 1.0),)),
    "--control-vector-scaled": ("c.gguf:-2", "adapters", "control_vectors",
                                ((Path("c.gguf"), -2.0),)),
    "--control-vector-layer-range": (("2", "5"), "adapters", "control_vector_layers", (2, 5)),
    "--verbose-prompt": (None, "load", "verbose_prompt", True),
    "--special": (None, "load", "special", True),
    "--output": (os.devnull, "load", "transcript", Path(os.devnull)),
}
#: SETTING rows whose value may be any text (a file name): no value is "nonsense" to them
ANY_TEXT = {"--log-file", "--api-key-file", "--ssl-key-file", "--ssl-cert-file", "--path",
            "--cors-origins", "--cors-methods", "--cors-headers", "--models-dir", "--lora",
            "--control-vector", "--output", "--slot-save-path", "--models-preset"}


@functools.cache
def _options(command: str) -> set[str]:
    group = cli_group()
    cmd = group.commands[command]
    helps = set(group.context_settings["help_option_names"])
    return helps | {name for p in cmd.params for name in (*p.opts, *p.secondary_opts)}


def _cases(*statuses: Status):
    """(row, command) for every command of every row of these statuses."""
    return [
        pytest.param(row, cmd, id=f"{cmd}{row.key}")
        for row in flag_table() if row.status in statuses for cmd in sorted(row.commands)
    ]  # fmt: skip


def _once(*statuses: Status):
    """(row, command) once per row, on serve where it takes it, else run: the behaviour is the
    table's, the same in every command (each command's options are checked above)."""
    return [
        pytest.param(row, cmd, id=f"{cmd}{row.key}")
        for row in flag_table() if row.status in statuses
        for cmd in [next((c for c in ("serve", "run") if c in row.commands), None)] if cmd
    ]  # fmt: skip


def test_every_vendored_flag_has_a_row() -> None:
    missing = [f.key for f in vendored_flags() if entry_of(f) is None]
    assert not missing, f"flags of llama.cpp's --help with no row: {missing}"
    assert len(vendored_flags()) > 250  # the recorded --help is whole, not a stub


def test_recorded_help_is_what_the_script_writes(tmp_path: Path) -> None:
    """The checked-in data parses back to the same options (the script's output shape)."""
    data = (ROOT / "specgguf" / "flag_table" / "llama_cpp_help.json").read_text()
    assert '"--flash-attn"' in data and '"LLAMA_ARG_UBATCH"' in data


@pytest.mark.parametrize(
    ("row", "command"),
    _cases(Status.DECLARED, Status.SETTING, Status.ALWAYS, Status.DEPRECATED, Status.REFUSED,
           Status.PRESET),
)
def test_command_declares_every_spelling(row, command: str) -> None:
    names = _options(command)
    missing = [s for s in (*row.flag.spellings, *row.flag.negative) if s not in names]
    assert not missing, f"specgguf {command} lacks {missing} ({row.status.value})"


@pytest.mark.parametrize(
    ("row", "command"),
    [c for c in _cases(Status.DECLARED) if c.values[0].entry.help is not None],
)
def test_an_option_made_from_its_row_is_the_row(row, command: str) -> None:
    """A DECLARED row with its own `help` is the command's option (table_flags.own_option):
    one parameter with the row's spellings, variable, value form and help, no other."""
    params = [p for p in cli_group().commands[command].params
              if set(p.opts) & set(row.flag.spellings)]  # fmt: skip
    assert len(params) == 1, f"{row.key}: {len(params)} options in {command}"
    p = params[0]
    assert (p.opts, p.secondary_opts) == (list(row.flag.spellings), list(row.flag.negative))
    assert p.envvar == row.flag.env
    assert p.help == row.entry.help
    assert p.metavar == (" ".join(row.flag.values) or None)
    assert p.default == (False if row.is_switch else None)


@pytest.mark.parametrize(("row", "command"), _cases(Status.DELEGATED))
def test_delegated_flags_once_merged(row, command: str) -> None:
    """A flag of another family is checked once that family's branch declares it."""
    names = _options(command)
    if not any(s in names for s in row.flag.spellings):
        pytest.skip(f"{row.key}: {row.entry.note} (not merged here)")
    missing = [s for s in row.flag.spellings if s not in names]
    assert not missing, f"specgguf {command} lacks {missing}"


@pytest.fixture
def loads(monkeypatch, tmp_path):
    """run/serve stopped where they would load the pair; yields the LoadOptions seen."""
    seen = stop_at_load(monkeypatch, tmp_path)
    monkeypatch.setattr(o, "resolve_models", lambda m, d: (tmp_path / "t.gguf", None))
    return seen


BASE = {"run": ["run", "-p", "x", "--spec-type", "none", "--spec-draft-n-max", "0", "-q"],
        "serve": ["serve", "--port", "0", "--spec-type", "none", "--spec-draft-n-max", "0",
                  "-q"]}  # fmt: skip


def _given(tuning, where: str, field: str):
    if where in FLAT_SCOPES:
        return dict(getattr(tuning, where))[field]
    scope, role = where.split(".")
    roles = ("target", "draft") if role == "both" else (role,)
    got = {dict(getattr(tuning, f"{r}_{scope}")).get(field) for r in roles}
    assert len(got) == 1, f"{field}: target and draft differ: {got}"
    return got.pop()


@pytest.mark.parametrize(("row", "command"), _once(Status.SETTING))
def test_setting_reaches_the_load_options(row, command: str, loads, capsys, monkeypatch) -> None:
    assert row.key in SAMPLES, f"{row.key}: give it a sample in SAMPLES"
    value, where, field, expected = SAMPLES[row.key]
    # the TLS files are checked as a pair, read as PEM (tests/test_serve_http.py): not here
    monkeypatch.setattr(HttpSettings, "check", lambda self: None)
    values = [value] if isinstance(value, str) else list(value or ())  # a tuple: several
    argv = [*BASE[command], row.flag.spellings[0], *values]
    assert run_cli(argv) == 99, capsys.readouterr().err
    got = _given(loads[-1].tuning, where, field)
    assert got == pytest.approx(expected) if isinstance(expected, float) else got == expected
    if where == "load":
        assert getattr(loads[-1], field) == expected


@pytest.mark.parametrize(("row", "command"), _once(Status.SETTING))
def test_setting_bad_value_is_one_line(row, command: str, loads, capsys) -> None:
    if row.is_switch or row.key in ANY_TEXT:
        pytest.skip("a switch has no value; a file name may be any text")
    nonsense = ["nonsense"] * len(row.flag.values)
    assert run_cli([*BASE[command], row.flag.spellings[0], *nonsense]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "invalid value for" in err and not loads


@pytest.mark.parametrize(("row", "command"), _once(Status.REFUSED))
def test_refused_flag_is_one_line_exit_1(row, command: str, loads, capsys) -> None:
    value = [] if row.is_switch else ["1"]
    assert run_cli([*BASE[command], row.flag.spellings[-1], *value]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"error: {'/'.join(row.flag.spellings)}" + (
        f" (or {row.flag.env})" if row.flag.env else "") + f": {row.entry.note}"
    assert not loads  # refused before anything would load


@pytest.mark.parametrize(("row", "command"), _once(Status.ALWAYS))
def test_always_accepts_its_value_and_refuses_the_other(row, command, loads, capsys) -> None:
    always = row.entry.always
    if row.is_switch and not row.flag.negative:
        assert run_cli([*BASE[command], row.flag.spellings[0]]) == 99
        return
    if row.is_switch:
        ok = row.flag.spellings[0] if always else row.flag.negative[0]
        other = [row.flag.negative[0] if always else row.flag.spellings[0]]
        accepted = [ok]
    else:
        accepted, other = [row.flag.spellings[0], always], [row.flag.spellings[0], "on"]
    assert run_cli([*BASE[command], *accepted]) == 99, capsys.readouterr().err
    capsys.readouterr()
    assert run_cli([*BASE[command], *other]) == 1
    assert row.entry.note in capsys.readouterr().err


@pytest.mark.parametrize(("row", "command"), _once(Status.DEPRECATED))
def test_deprecated_warns_and_goes_on(row, command: str, loads, capsys) -> None:
    assert run_cli([*BASE[command], row.flag.spellings[0], "1"]) == 99
    assert f"warning: {row.entry.note}" in capsys.readouterr().err


@pytest.mark.parametrize(("row", "command"), _cases(Status.REMOVED))
def test_removed_flags_are_refused_as_llama_cpp_does(row, command: str, capsys) -> None:
    if command == "bench":
        pytest.skip("not a bench flag")
    assert run_cli([command, row.flag.spellings[0], "3"]) == 1
    assert "removed" in capsys.readouterr().err


def test_bare_flash_attn_and_color_mean_on() -> None:
    assert with_bare_values(["-fa", "-c", "64"]) == ["-fa", "on", "-c", "64"]
    assert with_bare_values(["-fa", "off"]) == ["-fa", "off"]
    assert with_bare_values(["--color"]) == ["--color", "on"]
    assert with_bare_values(["--", "-fa"]) == ["--", "-fa"]


def test_bare_flash_attn_reaches_the_context(loads) -> None:
    assert run_cli([*BASE["run"], "-fa", "-c", "64"]) == 99
    assert loads[-1].flash_attn == "on" and loads[-1].n_ctx == 64


def test_variable_of_a_setting_is_read(loads, monkeypatch) -> None:
    monkeypatch.setenv("LLAMA_ARG_UBATCH", "128")
    assert run_cli(BASE["serve"]) == 99
    assert loads[-1].n_ubatch == 128


def test_escape_processes_the_prompt() -> None:
    from specgguf_cli.run_cmd import unescape

    assert unescape(r"a\nb\t\"c\\ \x41 \q") == 'a\nb\t"c\\ A \\q'


def test_docs_table_is_current() -> None:
    from specgguf.flag_table.docs import replace_in

    page = (ROOT / "docs" / "running.md").read_text(encoding="utf-8")
    assert replace_in(page) == page, "docs/running.md is stale: python scripts/flag_docs.py"


def test_llama_enum_numbers_match_the_bindings() -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    for names, prefix in ((v.LOAD_MODES, "LLAMA_LOAD_MODE_"), (v.SPLIT_MODES, "LLAMA_SPLIT_MODE_"),
                          (v.LAZY_MODES, "LLAMA_LAZY_MODE_"),
                          (v.POOLING, "LLAMA_POOLING_TYPE_"),
                          (v.ROPE_SCALING, "LLAMA_ROPE_SCALING_TYPE_")):  # fmt: skip
        for name, number in names.items():
            const = prefix + name.upper().replace("MMAP+MLOCK", "MMAP_MLOCK").replace(
                "DIO", "DIRECT_IO")
            assert getattr(llama_cpp, const) == number, const


def test_spec_default_is_llama_servers_preset_over_the_pulled_pair() -> None:
    preset = ["--spec-ngram-mod-n-match", "24", "--spec-ngram-mod-n-min", "48",
              "--spec-ngram-mod-n-max", "64"]  # fmt: skip
    assert expand_presets(["--spec-default", "-c", "64"]) == [
        *preset, "--spec-type", "ngram-mod,draft-simple", "-c", "64"]  # the pulled pair
    assert expand_presets(["-m", "t.gguf", "--spec-default"]) == [
        *preset, "--spec-type", "ngram-mod", "-m", "t.gguf"]
    assert expand_presets(["-m", "t", "-md", "d", "--spec-type", "ngram-simple", "--spec-default",
                           "--spec-ngram-mod-n-max", "32"]) == [
        *preset, "--spec-type", "ngram-simple,ngram-mod,draft-simple", "-m", "t", "-md", "d",
        "--spec-ngram-mod-n-max", "32"]  # the command line's own value comes later: it wins


def test_spec_default_reaches_the_session(loads, monkeypatch) -> None:
    seen = {}
    real = o.SessionFlags.resolve

    def resolve(self, spec_type, n_max):
        seen["types"], seen["ngram"] = spec_type, self.ngram
        return real(self, spec_type, n_max)

    monkeypatch.setattr(o.SessionFlags, "resolve", resolve)
    argv = ["serve", "--port", "0", "-q", "-m", "t.gguf", "--spec-default"]
    assert run_cli(argv) == 99
    assert seen["types"] == "ngram-mod" and seen["ngram"].mod.n_match == 24


def test_no_webui_and_no_slots_switch_their_endpoints_off(loads, monkeypatch) -> None:
    from specgguf.server.app import ServerConfig, served

    seen = []
    monkeypatch.setattr(o.SessionFlags, "open_session", lambda self, *a, **k: seen.append(
        self.switched_off()) or (_ for _ in ()).throw(Loaded("stop", 99)))  # fmt: skip
    assert run_cli([*BASE["serve"], "--no-webui", "--no-slots"]) == 99
    assert seen[-1] == {"page", "slots"}
    handlers = {e.handler for e in served(ServerConfig("m", "m", disabled=seen[-1]))}
    assert "page" not in handlers and "slots" not in handlers and "metrics" in handlers


def test_engine_writes_the_overrides_over_llama_cpps_parameters() -> None:
    pytest.importorskip("llama_cpp")
    from specgguf.binding import engine

    cp = engine.llama_params(engine.ContextParams(overrides=(("n_threads_batch", 3),
                                                             ("rope_freq_base", 5e4))))
    assert cp.n_threads_batch == 3 and cp.rope_freq_base == 5e4


def test_model_loads_under_a_load_mode_and_tensor_split(tiny_target) -> None:
    pytest.importorskip("llama_cpp")
    from specgguf.binding import engine

    model = engine.Model(tiny_target, overrides=(("load_mode", v.LOAD_MODES["none"]),
                                                 ("tensor_split", (1.0,))))
    try:
        assert model.n_vocab > 0
    finally:
        model.close()


def test_tensor_placements_add_up(loads) -> None:
    """-ot, -cmoe and -ncmoe each add placements (llama.cpp appends them), -ot's first."""
    assert run_cli([*BASE["serve"], "-cmoe", "-ot", "a=CPU,b=CPU"]) == 99
    got = dict(loads[-1].tuning.target_model)["tensor_buft_overrides"]
    assert got == (("a", "CPU"), ("b", "CPU"), (v.FFN_EXPERTS, "CPU"))


def test_model_loads_with_tensors_on_the_cpu(tiny_target) -> None:
    pytest.importorskip("llama_cpp")
    from specgguf.binding import engine
    from specgguf.loading.session import with_placements

    placed = with_placements((("tensor_buft_overrides", (("blk", "CPU"),)),))
    model = engine.Model(tiny_target, overrides=placed)
    try:
        assert model.n_vocab > 0
    finally:
        model.close()
    with pytest.raises(SpecggufError, match="unknown buffer type 'NOPE'"):
        with_placements((("tensor_buft_overrides", (("blk", "NOPE"),)),))


@pytest.mark.parametrize("command", COMMANDS)
def test_version_in_llama_cpps_shape(command: str, capsys) -> None:
    assert run_cli([command, "--version"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"version: \S+ \(build llama-cpp-python \S+, commit \S+\)", lines[0])
    assert lines[1].startswith("built with ") and " for " in lines[1]


def test_cpu_placement_folds_the_batch_and_draft_forms(loads) -> None:
    """One process, one placement: every CPU named, the highest priority, the most polling."""
    argv = [*BASE["serve"], "-Cr", "0-1", "-Cb", "0x8", "--prio", "-1", "--prio-batch", "2",
            "--poll", "10", "--spec-draft-poll", "30", "--cpu-strict", "0"]  # fmt: skip
    assert run_cli(argv) == 99
    got = dict(loads[-1].tuning.process)
    assert got == {"cpus": frozenset({0, 1, 3}), "nice": -10, "poll": 30, "cpu_strict": False}


def test_cpu_mask_and_range_read_as_llama_cpp_reads_them() -> None:
    assert v.cpu_mask("0x11") == v.cpu_mask("11") == frozenset({0, 4})
    assert v.cpu_range("2-") == frozenset(range(2, v.MAX_CPUS))
    for parse, bad in ((v.cpu_mask, ""), (v.cpu_mask, "0xg"), (v.cpu_range, "3-1"),
                       (v.cpu_range, "5"), (v.cpu_range, "a-b"), (v.cpu_range, "0-512")):
        with pytest.raises(ValueError):
            parse(bad)
