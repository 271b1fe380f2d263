"""--override-kv, --lora, --lora-scaled, --control-vector, --control-vector-scaled,
--control-vector-layer-range, --special and --verbose-prompt on the tiny models, end to end
through `specgguf run`: each reaches the target as llama.cpp applies it, speculation stays
exact over the adapted target, and a bad file or value is one line with its exit code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from specgguf_cli.app import run_cli

from specgguf.binding import engine, kv_overrides
from specgguf.binding.kv_overrides import KvOverride
from specgguf.errors import ExitCode
from specgguf.flag_table import values as v
from specgguf.loading.session import with_placements
from tests.tiny_models import (
    IM_START_ID,
    N_EMBD,
    N_VOCAB,
    TARGET_SEED,
    build_tiny_model,
    write_file,
)

FAST = ["-t", "1", "-c", "256", "-fa", "off", "--temp", "0", "-n", "12", "--json", "-q"]
PROMPT = "the cat sat on the"


def write_lora(path: Path, *, token: int, strength: float, arch: str = "llama",
               width: int = N_EMBD) -> Path:  # fmt: skip
    """A rank-1 LoRA GGUF on output.weight that adds `strength` times the final hidden
    state's channel 0 (the tiny models' constant bias channel) to `token`'s logit."""
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", 1.0)
    a = np.zeros((1, width), dtype=np.float32)  # (rank, n_embd): ggml's ne [n_embd, rank]
    a[0, 0] = 1.0
    b = np.zeros((N_VOCAB, 1), dtype=np.float32)  # (n_vocab, rank): ne [rank, n_vocab]
    b[token, 0] = strength
    w.add_tensor("output.weight.lora_a", a)
    w.add_tensor("output.weight.lora_b", b)
    write_file(w)
    return path


def write_control_vector(path: Path, layers: dict[int, np.ndarray]) -> Path:
    """A control vector GGUF: one F32 direction.N tensor per layer N."""
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), "controlvector")
    for layer, vector in layers.items():
        w.add_tensor(f"direction.{layer}", vector.astype(np.float32))
    write_file(w)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("adapters")
    steer = np.zeros(N_EMBD, dtype=np.float32)
    steer[5] = 40.0  # a large push along one channel: the output follows that channel
    return {
        "x": write_lora(d / "x.gguf", token=ord("x"), strength=60.0),
        "nudge": write_lora(d / "nudge.gguf", token=ord(" "), strength=3.0),
        "wide": write_lora(d / "wide.gguf", token=ord("x"), strength=1.0, width=N_EMBD * 2),
        "cvec": write_control_vector(d / "cvec.gguf", {1: steer}),
        "cvec_narrow": write_control_vector(d / "narrow.gguf", {1: steer[:16]}),
        # three layers: a vector can be put after layer 1 or layer 2
        "target3": build_tiny_model(d / "three.gguf", seed=TARGET_SEED, n_layer=3),
    }


@pytest.fixture
def run(tiny_target, capsys):
    """run(*args) -> (exit code, --json object or None, stderr)."""

    def _run(*args, model=None):
        code = run_cli(["run", "-m", str(model or tiny_target), *FAST, "-p", PROMPT,
                        *map(str, args)])  # fmt: skip
        out = capsys.readouterr()
        return code, (json.loads(out.out) if code == 0 else None), out.err

    return _run


def text(result) -> str:
    code, obj, err = result
    assert code == 0, err
    return obj["text"]


# -- --override-kv ------------------------------------------------------------------------------


def test_override_kv_parses_as_llama_cpp_does() -> None:
    parsed = v.kv_overrides('a.b=int:-3,c=float:0.5,d=bool:true,"e=str:x,y"')
    assert parsed == (("a.b", 0, -3), ("c", 1, 0.5), ("d", 2, True), ("e", 3, "x,y"))
    for bad in ("a=int", "a:int:1", "a=long:1", "a=bool:yes", "a=int:1.5", "a=str:" + "z" * 128,
                "=int:1"):  # fmt: skip
        with pytest.raises(ValueError):
            v.kv_overrides(bad)


def test_override_struct_is_llama_hs() -> None:
    fields = dict(engine.ll.llama_model_kv_override._fields_)
    assert [n for n, _ in KvOverride._fields_] == list(fields)
    import ctypes

    assert ctypes.sizeof(KvOverride) == ctypes.sizeof(engine.ll.llama_model_kv_override)


def test_override_kv_reaches_the_loaded_model(tiny_target) -> None:
    overrides = (("kv_overrides", v.kv_overrides(
        "llama.context_length=int:1024,tokenizer.ggml.add_bos_token=bool:true")),)
    model = engine.Model(tiny_target, overrides=with_placements(overrides))
    try:
        assert model.n_ctx_train == 1024 and model.add_bos
    finally:
        model.close()
    plain = engine.Model(tiny_target)
    try:
        assert plain.n_ctx_train == 2048 and not plain.add_bos
    finally:
        plain.close()


def test_override_kv_changes_the_run(run) -> None:
    _, base, _ = run()
    code, obj, err = run("--override-kv", "tokenizer.ggml.add_bos_token=bool:true")
    assert code == 0, err
    assert obj["tokens_evaluated"] == base["tokens_evaluated"] + 1  # the BOS llama.cpp adds


def test_override_kv_of_the_wrong_type_is_one_line(run) -> None:
    code, _, err = run("--override-kv", "tokenizer.ggml.add_bos_token=int:1")
    assert code == ExitCode.USAGE and err.count("\n") == 1, err
    assert "tokenizer.ggml.add_bos_token is a bool" in err
    # a key the file lacks is used where llama.cpp reads it: said in a note, and run
    assert run("--override-kv", "tokenizer.ggml.add_sep_token=bool:false")[0] == 0
    notes = kv_overrides.check(v.kv_overrides("a.b=int:1,c=str:x"), {"c": "y"}, "m.gguf")
    assert notes == ["--override-kv: a.b is not in m.gguf: it is used only if llama.cpp reads "
                     "that key for this model"]  # fmt: skip


# -- LoRA ---------------------------------------------------------------------------------------


def test_lora_applies_to_the_target(run, files) -> None:
    base = text(run("--spec-type", "none"))
    assert "x" not in base
    assert text(run("--spec-type", "none", "--lora", files["x"])) == "x" * 12
    # a scale of 0 is the base model; the scale is the one given
    assert text(run("--spec-type", "none", "--lora-scaled", f"{files['x']}:0")) == base


def test_speculation_stays_exact_over_the_adapted_target(run, files, tiny_draft) -> None:
    lora = ["--lora-scaled", f"{files['nudge']}:1.0"]
    plain = text(run("--spec-type", "none", *lora))
    assert plain != text(run("--spec-type", "none"))  # the adapter changes the text
    drafted = run("-md", tiny_draft, "--spec-type", "draft-simple", "--spec-draft-n-max", "4",
                  *lora)  # fmt: skip
    assert text(drafted) == plain
    assert drafted[1]["timings"]["draft_n"] > 0  # the draft model did draft


def test_lora_errors_are_one_line(run, files, tmp_path) -> None:
    code, _, err = run("--lora", tmp_path / "missing.gguf")
    assert code == ExitCode.MODEL and "no such LoRA file" in err and err.count("\n") == 1
    code, _, err = run("--lora", files["wide"])  # made for a wider model
    assert code == ExitCode.MODEL and "LoRA adapter" in err and err.count("\n") == 1
    code, _, err = run("--lora-scaled", f"{files['x']}")  # no :SCALE
    assert code == ExitCode.USAGE and "FNAME:SCALE" in err


# -- control vectors ----------------------------------------------------------------------------


def test_control_vector_steers_the_target(run, files) -> None:
    model = files["target3"]
    base = text(run("--spec-type", "none", model=model))
    steered = text(run("--spec-type", "none", "--control-vector", files["cvec"], model=model))
    assert steered != base
    # strength 0 adds nothing; a range past the file's layer adds nothing either
    zero = run("--spec-type", "none", "--control-vector-scaled", f"{files['cvec']}:0",
               model=model)  # fmt: skip
    assert text(zero) == base
    assert text(run("--spec-type", "none", "--control-vector", files["cvec"],
                    "--control-vector-layer-range", "2", "2", model=model)) == base  # fmt: skip
    assert text(run("--spec-type", "none", "--control-vector", files["cvec"],
                    "--control-vector-layer-range", "1", "2", model=model)) == steered  # fmt: skip


def test_control_vector_speculation_is_exact(run, files, tiny_draft) -> None:
    cvec = ["--control-vector-scaled", f"{files['cvec']}:0.05"]
    plain = text(run("--spec-type", "none", *cvec))
    drafted = text(run("-md", tiny_draft, "--spec-type", "draft-simple", *cvec))
    assert drafted == plain


def test_control_vector_errors_are_one_line(run, files, tmp_path) -> None:
    code, _, err = run("--control-vector", files["cvec_narrow"])
    assert code == ExitCode.INCOMPATIBLE and "width" in err and err.count("\n") == 1
    code, _, err = run("--control-vector", files["x"])  # a LoRA file is not one
    assert code == ExitCode.MODEL and "direction.N" in err and err.count("\n") == 1
    not_gguf = tmp_path / "not.gguf"
    not_gguf.write_text("hello")
    code, _, err = run("--control-vector", not_gguf)
    assert code == ExitCode.MODEL and err.count("\n") == 1


# -- --special and --verbose-prompt (a LoRA makes the tiny target write a control token) -------


def test_special_prints_special_tokens(run, files, tmp_path) -> None:
    im_start = write_lora(tmp_path / "im_start.gguf", token=IM_START_ID, strength=120.0)
    quiet = text(run("--spec-type", "none", "-n", "3", "--lora", im_start))
    assert quiet == ""  # a special token is nothing in the output ...
    shown = text(run("--spec-type", "none", "-n", "3", "--lora", im_start, "-sp"))
    assert shown == "<|im_start|>" * 3  # ... unless --special asks for its text


def test_verbose_prompt_lists_the_prompts_tokens(run) -> None:
    code, obj, err = run("--spec-type", "none", "--verbose-prompt")
    assert code == 0
    assert f"prompt: '{PROMPT}'" in err
    assert f"number of tokens in prompt = {obj['tokens_evaluated']}" in err
    listed = re.findall(r"^ *(\d+) -> '(.*)'$", err, re.M)
    assert len(listed) == obj["tokens_evaluated"] and "".join(p for _, p in listed) == PROMPT
    assert listed[0] == (str(ord("t")), "t") or int(listed[0][0]) >= 256  # a byte or a merge
    assert "prompt:" not in run("--spec-type", "none")[2]


def test_repeated_flags_add_up_as_in_llama_cpp(run, files) -> None:
    """--lora a --lora b loads both (a flag that only set a value would keep b alone)."""
    one, zero = f"{files['x']}:1", f"{files['x']}:0"
    assert text(run("--spec-type", "none", "--lora-scaled", one, "--lora-scaled", zero)) == "x" * 12


def test_every_slot_of_a_server_is_adapted(tiny_target, tiny_draft, files) -> None:
    """-np 2: the slots' shared target context (a server's) has the adapter too."""
    from specgguf.core.sampling import SamplerParams
    from specgguf.generator import Generator
    from specgguf.loading.session import LoadOptions, Session, SpecOptions
    from specgguf.loading.tuning import LlamaTuning

    tuning = LlamaTuning(adapters=(("loras", ((files["x"], 1.0),)),))
    load = LoadOptions(model=tiny_target, model_draft=tiny_draft, n_ctx=512, threads=1,
                       flash_attn="off", tuning=tuning)  # fmt: skip
    session = Session(load, SpecOptions(types=["draft-simple"], n_max=3), parallel=2)
    try:
        assert session.rendezvous is not None  # the slots are sequences of one context
        gen = Generator(session, sampler=SamplerParams(temp=0.0), n_predict=6, seed=7)
        tokens = session.tokenize(PROMPT)
        for slot in (0, 1):
            emitted = [t for c in gen.generate(tokens, slot=slot) if c.round is not None
                       for t in c.round.emitted]  # fmt: skip
            assert emitted == [ord("x")] * 6
    finally:
        session.close()


def test_serves_embeddings_from_the_adapted_target(files) -> None:
    """serve --embeddings: the embeddings context is adapted as the generation's is."""
    from specgguf_cli.serve_cmd import embeddings_context

    from specgguf.loading.session import LoadOptions, Session, SpecOptions
    from specgguf.loading.tuning import LlamaTuning

    def embedding(*adapters) -> np.ndarray:
        load = LoadOptions(model=files["target3"], n_ctx=256, threads=1, flash_attn="off",
                           tuning=LlamaTuning(adapters=adapters))  # fmt: skip
        session = Session(load, SpecOptions(types=[]))
        try:
            embedder = embeddings_context(session, 256, 1)  # mean pooling
            try:
                return embedder.embed(session.tokenize(PROMPT))[0]
            finally:
                embedder.close()
        finally:
            session.close()

    plain = embedding()
    steered = embedding(("control_vectors", ((files["cvec"], 1.0),)))
    assert not np.allclose(plain, steered)
    assert np.allclose(plain, embedding(("control_vectors", ((files["cvec"], 0.0),))))
