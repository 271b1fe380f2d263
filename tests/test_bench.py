"""`specgguf bench`: configuration and prompt parsing, the recommendation rule (pure), and whole
benches on the tiny models (structure of the table and of --json, lossless greedy output, a
recommendation consistent with the measured ratios)."""

from __future__ import annotations

import json

import pytest

from specgguf.bench import (
    BUILTIN_PROMPTS,
    CONTROL,
    MARGIN,
    PLAIN,
    BenchConfig,
    BenchOptions,
    BenchPrompt,
    ConfigSummary,
    CostCurve,
    Spread,
    conditional_acceptance,
    load_prompts,
    parse_configs,
    parse_n_max_list,
    recommend,
    run_bench,
    to_json,
)
from specgguf.errors import PromptError, UsageError

# -- parsing -----------------------------------------------------------------------------------


def test_parse_n_max_list():
    assert parse_n_max_list("3") == [3]
    assert parse_n_max_list("2, 3,auto") == [2, 3, None]
    assert parse_n_max_list("1..4") == [1, 2, 3, 4]
    assert parse_n_max_list("1..3,2,auto,AUTO") == [1, 2, 3, None]
    for bad in ("", "x", "4..1", "300", "1..", "-1"):
        with pytest.raises(UsageError):
            parse_n_max_list(bad, what="--sweep-n-max")


def labels(configs):
    return [c.label for c in configs]


def test_parse_configs_defaults_put_plain_first():
    assert labels(parse_configs(None, [3], have_draft_model=True)) == [
        "none",
        "draft-simple n_max=3",
        "ngram-simple",
        "ngram-map-k",
        "default (ngram-map-k,suffix,draft-simple auto)",
    ]
    assert labels(parse_configs([], [3], have_draft_model=False)) == [
        "none",
        "ngram-simple",
        "ngram-map-k",
        "default (ngram-map-k,suffix auto)",
    ]


def test_default_row_runs_with_no_flags_and_size_m_sweeps_the_ngram_rows():
    cfgs = parse_configs(["default;ngram-simple;draft-simple"], [3], have_draft_model=True,
                         size_m_values=[8, 32])  # fmt: skip
    assert labels(cfgs) == [
        "none",
        "default (ngram-map-k,suffix,draft-simple auto)",
        "ngram-simple m=8",
        "ngram-simple m=32",
        "draft-simple n_max=3",
    ]
    assert cfgs[1].run_flags() == []  # what `specgguf run` does by default
    assert cfgs[3].run_flags() == [
        "--spec-type", "ngram-simple", "--spec-ngram-simple-size-m", "32"
    ]  # fmt: skip


def test_parse_configs_semicolons_repeats_lengths_and_sweeps():
    cfgs = parse_configs(
        ["draft-simple:2..3; ngram-simple", "ngram-simple,draft-simple:auto", "none"],
        [3],
        have_draft_model=True,
    )
    assert labels(cfgs) == [
        "none",
        "draft-simple n_max=2",
        "draft-simple n_max=3",
        "ngram-simple",
        "ngram-simple,draft-simple auto",
        "none (control)",  # an explicit `none`: plain measured again, the noise floor
    ]
    # without ':N', draft-simple takes every swept length; n-gram-only configs run once
    cfgs = parse_configs(["draft-simple;ngram-mod"], [1, 2, None], have_draft_model=True)
    assert labels(cfgs) == [
        "none",
        "draft-simple n_max=1",
        "draft-simple n_max=2",
        "draft-simple auto",
        "ngram-mod",
    ]
    assert cfgs[3].auto and cfgs[3].run_flags() == [
        "--spec-type",
        "draft-simple",
        "--spec-draft-n-max",
        "auto",
    ]
    assert cfgs[4].run_flags() == ["--spec-type", "ngram-mod"]
    assert PLAIN.run_flags() == ["--spec-type", "none"]


def test_parse_configs_errors_name_the_problem():
    with pytest.raises(UsageError, match="draft-simple needs a draft model"):
        parse_configs(["draft-simple"], [3], have_draft_model=False)
    with pytest.raises(UsageError, match="'bogus'"):
        parse_configs(["ngram-simple;bogus"], [3], have_draft_model=True)
    with pytest.raises(UsageError, match="draft-simple:x"):
        parse_configs(["draft-simple:x"], [3], have_draft_model=True)


def test_builtin_prompt_set_has_four_classes():
    lines = [json.loads(x) for x in BUILTIN_PROMPTS.read_text().splitlines() if x.strip()]
    assert {x["class"] for x in lines} == {"code", "chat", "rewrite", "edit"}
    assert all(set(x) == {"class", "prompt"} and x["prompt"] for x in lines)
    for x in lines:
        if x["class"] == "rewrite":  # a function of ~30 lines to copy back with new names
            body = x["prompt"].split("```python\n", 1)[1].split("```", 1)[0]
            assert 25 <= len(body.splitlines()) <= 40
            assert "print the whole result" in x["prompt"]
        if x["class"] == "edit":  # one fix in a ~40-line file, printed whole
            body = x["prompt"].split("```", 1)[1].split("\n", 1)[1].split("```", 1)[0]
            assert 30 <= len(body.splitlines()) <= 50
            assert "print the whole" in x["prompt"]


def test_load_prompts_sources_and_filters(tmp_path):
    allp = load_prompts()
    assert len(allp) == 9
    rw = load_prompts(classes=["rewrite"])
    assert {p.cls for p in rw} == {"rewrite"}
    assert [p.cls for p in load_prompts(per_class=1)] == ["code", "chat", "rewrite", "edit"]
    assert load_prompts(text="hello") == [BenchPrompt("custom", "hello")]
    f = tmp_path / "p.jsonl"
    f.write_text('{"class": "a", "prompt": "x"}\n\n{"prompt": "y"}\n')
    assert load_prompts(file=f) == [BenchPrompt("a", "x"), BenchPrompt("custom", "y")]
    plain = tmp_path / "p.txt"
    plain.write_text("just one prompt\non two lines\n")
    assert load_prompts(file=plain) == [BenchPrompt("custom", "just one prompt\non two lines\n")]
    with pytest.raises(UsageError, match="no such class"):
        load_prompts(classes=["poetry"])
    with pytest.raises(UsageError, match="no such file"):
        load_prompts(file=tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\nnot json\n')
    with pytest.raises(PromptError, match="bad.jsonl:2"):
        load_prompts(file=bad)
    # before: RecursionError, and a prompt with a lone surrogate that failed in tokenization
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"prompt": "x"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(PromptError, match="deep.jsonl:2: not a JSON object"):
        load_prompts(file=deep)
    lone = tmp_path / "lone.jsonl"
    lone.write_text('{"prompt": "x"}\n{"prompt": "\\ud800"}\n')
    with pytest.raises(PromptError, match="lone.jsonl:2: 'prompt' holds a lone UTF-16"):
        load_prompts(file=lone)


# -- the recommendation rule -------------------------------------------------------------------


def row(cfg: BenchConfig, ratio: float | None, acc: list[float] | None = None) -> ConfigSummary:
    return ConfigSummary(
        config=cfg,
        tps=Spread(10.0, 9.0, 11.0),
        ratio=Spread(ratio, ratio - 0.05, ratio + 0.05) if ratio is not None else None,
        ratio_by_class={},
        accept_rate=0.7,
        mean_acceptance_length=2.0,
        per_position_acceptance=acc or [],
        n_drafted=10,
        same_as_plain=None,
        auto=None,
    )


DS2 = BenchConfig(("draft-simple",), 2)
NG = BenchConfig(("ngram-simple",), 3)
AUTO = BenchConfig(("draft-simple",), None)


def test_recommends_plain_when_no_ratio_beats_one():
    rows = [row(PLAIN, 1.0), row(DS2, 0.85), row(NG, 0.97), row(AUTO, 0.99)]
    rec = recommend(rows)
    assert not rec.speculate and rec.config == PLAIN
    assert rec.command == "specgguf run --spec-type none"
    assert "ngram-simple" not in rec.command and "x0.99" in rec.reason
    # within the noise margin is not a reason to speculate either
    assert not recommend([row(PLAIN, 1.0), row(DS2, 1.0 + MARGIN / 2)]).speculate


def test_a_lone_none_adds_a_plain_control_row_that_is_never_recommended():
    configs = parse_configs(["none;draft-simple:auto"], [3], have_draft_model=True)
    assert configs[0] == PLAIN and CONTROL in configs and len(configs) == 3
    assert CONTROL.label == "none (control)" and not CONTROL.plain
    assert CONTROL.run_flags() == ["--spec-type", "none"]
    # `none` inside a list still just resets it: no control row
    assert CONTROL not in parse_configs(
        ["draft-simple,none,ngram-simple"], [3], have_draft_model=True
    )
    # plain vs plain can come out above 1 by chance: that is noise, not a reason to speculate
    rec = recommend([row(PLAIN, 1.0), row(CONTROL, 1.08), row(AUTO, 0.99)])
    assert not rec.speculate and "none (control)" not in rec.reason
    # ... and it raises the bar: x1.05 is within twice the control's noise of x1.03
    assert recommend([row(PLAIN, 1.0), row(NG, 1.05)]).speculate
    assert not recommend([row(PLAIN, 1.0), row(CONTROL, 0.97), row(NG, 1.05)]).speculate
    assert recommend([row(PLAIN, 1.0), row(CONTROL, 0.99), row(NG, 1.05)]).speculate


def test_recommends_the_best_measured_configuration():
    rows = [row(PLAIN, 1.0), row(DS2, 0.9), row(NG, 1.3), row(AUTO, 1.1)]
    rec = recommend(rows, model_args=["-m", "t.gguf"])
    assert rec.speculate and rec.config == NG
    assert rec.expected_speedup == pytest.approx(1.3)
    assert rec.command == "specgguf run -m t.gguf --spec-type ngram-simple"
    rec = recommend([row(PLAIN, 1.0), row(AUTO, 1.2), row(DS2, 1.1)])
    assert rec.command.endswith("--spec-type draft-simple --spec-draft-n-max auto")


def test_cost_model_view_explains_the_measurement():
    # a CPU-like curve and draft step: draft-simple at 60% acceptance should not draft
    costs = CostCurve(
        target_ms={n: 70.0 * c for n, c in enumerate((1.0, 1.5, 1.8, 1.6, 2.0), start=1)},
        draft_ms=35.0,
    )
    assert costs.verify() == pytest.approx((1.0, 1.5, 1.8, 1.6, 2.0))
    assert costs.draft_rel == pytest.approx(0.5)
    rec = recommend([row(PLAIN, 1.0), row(DS2, 0.8, [0.6, 0.36])], costs)
    assert len(rec.model_view) == 1 and "no drafting" in rec.model_view[0]
    assert conditional_acceptance([0.6, 0.36, 0.0]) == pytest.approx([0.6, 0.6, 0.0])


# -- on the tiny models ------------------------------------------------------------------------

PROMPTS = [BenchPrompt("code", "def main():\n    return"), BenchPrompt("chat", "the cat sat on")]


@pytest.fixture(scope="module")
def tiny_bench(tiny_target, tiny_draft):
    from specgguf.core.sampling import SamplerParams
    from specgguf.generator import Generator
    from specgguf.loading.session import LoadOptions, Session, SpecOptions

    configs = parse_configs(
        ["draft-simple:2;ngram-simple;draft-simple:auto"], [3], have_draft_model=True
    )
    session = Session(
        LoadOptions(
            model=tiny_target, model_draft=tiny_draft, n_ctx=512, threads=1, flash_attn="off"
        ),
        SpecOptions(types=["ngram-simple", "draft-simple"], n_max=3),
    )
    try:
        result = run_bench(
            Generator(session),
            configs,
            PROMPTS,
            SamplerParams(temp=0.0),
            BenchOptions(n_predict=24, repeat=2, cost_reps=3),
        )
        assert session.spec.n_max == 3  # the session's own options are restored
    finally:
        session.close()
    return result


def test_bench_measures_every_configuration_on_every_prompt(tiny_bench):
    r = tiny_bench
    assert [c.label for c in r.configs] == [
        "none",
        "draft-simple n_max=2",
        "ngram-simple",
        "draft-simple auto",
    ]
    for cfg in r.configs:
        runs = r.runs[cfg]
        assert [(x.prompt, x.rep) for x in runs] == [(0, 0), (0, 1), (1, 0), (1, 1)]
        assert all(len(x.tokens) == 24 and x.tps > 0 for x in runs)
    rows = {x.config.label: x for x in r.rows}
    assert rows["none"].ratio.median == pytest.approx(1.0)
    ds = rows["draft-simple n_max=2"]
    assert 0 < ds.accept_rate < 1 and len(ds.per_position_acceptance) == 2
    assert 1.0 <= ds.mean_acceptance_length <= 3.0
    assert set(ds.ratio_by_class) == {"code", "chat"}
    auto = rows["draft-simple auto"].auto
    assert auto["rounds"] > 0 and sum(auto["chosen_k"].values()) == auto["rounds"]
    # greedy speculation is lossless: every configuration wrote plain decoding's text
    for x in r.rows[1:]:
        assert x.same_as_plain == (4, 4), x.config.label


def test_bench_cost_curve_and_json(tiny_bench):
    costs = tiny_bench.costs
    # 1..AUTO_CAP+1 tokens, and on the grid up to the n-gram types' widths when they run
    assert sorted(costs.target_ms)[:9] == list(range(1, 10))
    assert set(sorted(costs.target_ms)[9:]) <= {*range(10, 17), 24, 32, 48, 64, 65}
    assert costs.verify()[0] == 1.0 and costs.draft_rel is not None
    rec = recommend(tiny_bench.rows, costs)
    obj = json.loads(json.dumps(to_json(tiny_bench, rec)))
    assert set(obj) >= {"cost_curve", "configs", "recommendation", "prompts", "load_average"}
    assert obj["configs"][0]["spec_type"] == ["none"]
    assert obj["configs"][3]["n_max"] == "auto" and obj["configs"][3]["auto"]["rounds"] > 0
    assert obj["cost_curve"]["pass_cost_rel"]["1"] == 1.0


def test_bench_recommendation_is_consistent_with_the_ratios(tiny_bench):
    rows = tiny_bench.rows
    rec = recommend(rows, tiny_bench.costs)
    best = max(rows[1:], key=lambda x: x.ratio.median)
    if best.ratio.median > 1.0 + MARGIN:
        assert rec.speculate and rec.config == best.config
    else:
        assert not rec.speculate and rec.config == PLAIN


def test_bench_runs_are_generator_calls(tiny_target, tiny_draft, monkeypatch):
    """Every bench run (warm-ups included) is one Generator.generate call with its
    configuration's settings, and writes what the Generator writes for the same prompt and
    configuration: bench measures the path `run` takes. Sampled (--temp 0.7), so the text
    depends on the call's seed and settings."""
    from specgguf.bench import gen_params
    from specgguf.core.sampling import SamplerParams
    from specgguf.generator import Generator
    from specgguf.loading.session import LoadOptions, Session, SpecOptions

    calls = []
    real = Generator.generate

    def spy(self, tokens, params=None, **kw):
        calls.append(params)
        return real(self, tokens, params, **kw)

    monkeypatch.setattr(Generator, "generate", spy)
    configs = parse_configs(
        ["draft-simple:2;ngram-simple;draft-simple:auto"], [3], have_draft_model=True
    )
    sampler = SamplerParams(temp=0.7)
    options = BenchOptions(n_predict=12, seed=5, cost_reps=1, warm_auto=False)
    session = Session(
        LoadOptions(
            model=tiny_target, model_draft=tiny_draft, n_ctx=512, threads=1, flash_attn="off"
        ),
        SpecOptions(types=["ngram-simple", "draft-simple"], n_max=3),
    )
    try:
        result = run_bench(Generator(session), configs, PROMPTS[:1], sampler, options)
        assert len(calls) == 2 * len(configs)  # a warm-up and a measured run each
        for cfg, params in zip(configs * 2, calls, strict=True):
            plan = params.plan
            assert plan.spec.types == list(cfg.types) and plan.namespace == cfg
            assert plan.spec.adaptive == cfg.auto and plan.fresh_policy
        tokens = session.tokenize(PROMPTS[0].text)
        for cfg in configs:
            (run,) = result.runs[cfg]
            assert (run.auto is not None) == cfg.auto
            ref = Generator(session).generate(
                tokens,
                gen_params(
                    cfg, session.spec, n_predict=12, sampler=sampler, seed=5, ignore_eos=False
                ),
            )
            assert "".join(c.text for c in ref) == run.text != "", cfg.label
    finally:
        session.close()


# -- the command -------------------------------------------------------------------------------


def cli(args, capsys):
    from specgguf_cli.app import run_cli

    code = run_cli(["bench", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_bench_cli_json(tiny_target, tiny_draft, capsys):
    args = ["-m", str(tiny_target), "-md", str(tiny_draft), "-c", "512", "-t", "1"]
    args += ["-p", "def main():\n    return", "-n", "8", "--json", "--no-warmup"]
    args += ["--spec-type", "draft-simple:1..2", "--spec-type", "draft-simple:auto"]
    code, out, err = cli(args, capsys)
    assert code == 0, err
    obj = json.loads(out)
    assert [c["label"] for c in obj["configs"]] == [
        "none",
        "draft-simple n_max=1",
        "draft-simple n_max=2",
        "draft-simple auto",
    ]
    assert obj["greedy"] is True and obj["n_predict"] == 8
    rec = obj["recommendation"]
    assert rec["command"].startswith(f"specgguf run -m {tiny_target} -md {tiny_draft}")
    # (a pair whose run got too little CPU on a busy machine has no ratio: see STARVED)
    # and an auto row that never drafted is plain decoding, never recommended (IDLE_MEAN_K)
    ratios = [
        c["ratio_to_plain"]["median"]
        for c in obj["configs"][1:]
        if c["ratio_to_plain"] and not (c["auto"] and c["auto"]["mean_k"] < 0.05)
    ]
    assert rec["speculate"] == (bool(ratios) and max(ratios) > 1.0 + MARGIN)
    assert err == ""  # no progress bar when stderr is not a terminal


def test_bench_cli_table(tiny_target, tiny_draft, capsys):
    args = ["-m", str(tiny_target), "-md", str(tiny_draft), "-c", "512", "-t", "1"]
    args += ["-p", "the cat sat on", "-n", "8", "--spec-type", "draft-simple:2;ngram-simple"]
    code, out, err = cli(args, capsys)
    assert code == 0, err
    for text in ("config", "t/s median", "vs none", "accept", "mean len", "same text"):
        assert text in out
    for text in ("none", "draft-simple n_max=2", "ngram-simple", "cost curve:", "recommendation:"):
        assert text in out
    assert "1/1" in out  # lossless


def test_bench_cli_usage_errors_before_loading(tiny_target, capsys):
    base = ["-m", str(tiny_target), "-p", "x"]
    assert cli([*base, "--sweep-n-max", "5..1"], capsys)[0] == 1
    assert cli([*base, "-n", "0"], capsys)[0] == 1
    code, _, err = cli([*base, "--sweep-size-m", "8,zero"], capsys)
    assert code == 1 and "--sweep-size-m" in err and len(err.strip().splitlines()) == 1
    assert cli([*base, "--spec-type", "draft-simple"], capsys)[0] == 1  # no -md
    code, _, err = cli(["-m", str(tiny_target), "--prompt-class", "poetry"], capsys)
    assert code == 1 and "poetry" in err


def test_ctrl_c_reports_the_runs_that_finished(tiny_target, monkeypatch):
    import specgguf.bench as bench_mod
    from specgguf.core.sampling import SamplerParams
    from specgguf.generator import Generator
    from specgguf.loading.session import LoadOptions, Session, SpecOptions

    real = bench_mod.run_one
    calls = []

    def flaky(*args, **kwargs):
        calls.append(kwargs.get("prompt"))
        if len(calls) == 6:  # 2 warm-ups, prompt 0 (plain, ngram), prompt 1 plain; Ctrl-C
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(bench_mod, "run_one", flaky)
    session = Session(
        LoadOptions(model=tiny_target, n_ctx=512, threads=1, flash_attn="off"),
        SpecOptions(types=["ngram-simple"]),
    )
    try:
        configs = parse_configs(["ngram-simple"], [3], have_draft_model=False)
        result = run_bench(
            Generator(session), configs, PROMPTS, SamplerParams(temp=0.0), BenchOptions(n_predict=8)
        )
    finally:
        session.close()
    assert result.interrupted
    assert [len(result.runs[c]) for c in result.configs] == [2, 1]
    # the finished pair is reported (or, if one of its two tiny runs got too little CPU on a
    # busy machine, counted as stalled: either way it was kept, not lost to the Ctrl-C)
    assert result.rows[1].ratio is not None or result.rows[1].stalled_pairs == 1
    assert to_json(result, recommend(result.rows))["interrupted"] is True


def test_starved_runs_are_left_out_of_the_ratios():
    from specgguf.bench import BenchResult, RunResult, summarize

    def run(p, tps, share=1.9):
        t = {"draft_n": 0, "draft_n_accepted": 0, "rounds": 0, "per_position_acceptance": []}
        return RunResult(p, 0, [1, 2], tps, t, cpu_share=share)

    prompts = [BenchPrompt("code", "a"), BenchPrompt("chat", "b"), BenchPrompt("chat", "c")]
    result = BenchResult(
        configs=[PLAIN, NG],
        prompts=prompts,
        runs={
            PLAIN: [run(0, 0.6, share=0.4), run(1, 10.0), run(2, 11.0)],
            NG: [run(0, 9), run(1, 9), run(2, 9.9)],
        },
        costs=CostCurve({1: 70.0}, None),
        greedy=True,
        options=BenchOptions(),
    )
    rows = summarize(result)
    ng = rows[1]
    assert ng.stalled_pairs == 1 and ng.same_as_plain == (3, 3)
    assert ng.ratio.median == pytest.approx(0.9)  # not 9 / 0.6 = 15
    assert ng.tps.lo == 9  # the speeds themselves are all reported
    assert rows[0].tps.lo == 0.6
    # a steady load lowers every share alike: nothing is dropped
    for runs in result.runs.values():
        for r in runs:
            r.cpu_share = 0.7
    assert summarize(result)[1].stalled_pairs == 0


def test_runs_record_their_cpu_share(tiny_bench):
    assert all(r.cpu_share > 0.2 for runs in tiny_bench.runs.values() for r in runs)


def test_merged_auto_summaries_price_auto_against_plain():
    from specgguf.bench import _merge_auto

    runs = [
        {"chosen_k": {"0": 120, "1": 2}, "probes": 2, "tokens": 128, "probe_cost_steps": 0.6,
         "policy_ms": 16.0, "target_step_ms": 80.0},
        {"chosen_k": {"0": 128}, "probes": 0, "tokens": 128, "probe_cost_steps": 0.0,
         "policy_ms": 8.0, "target_step_ms": 80.0},
    ]  # fmt: skip
    m = _merge_auto(runs)
    assert m["tokens"] == 256 and m["probes"] == 2
    assert m["policy_steps"] == pytest.approx(0.3)
    assert m["overhead_vs_plain"] == pytest.approx((0.6 + 0.3) / 256, abs=1e-4)


def test_an_auto_row_that_never_drafted_is_not_recommended_as_speculation():
    idle = row(AUTO, 1.04)
    idle.auto = {"rounds": 354, "chosen_k": {"0": 354}, "mean_k": 0.0}
    rec = recommend([row(PLAIN, 1.0), row(DS2, 0.9), idle])
    assert not rec.speculate and rec.command == "specgguf run --spec-type none"
    assert "drafted in 0 of 354 rounds" in rec.reason
    busy = row(AUTO, 1.2)
    busy.auto = {"rounds": 60, "chosen_k": {"0": 10, "6": 50}, "mean_k": 5.0}
    assert recommend([row(PLAIN, 1.0), busy]).speculate


def test_the_recommended_command_keeps_the_ngram_options_bench_ran_with():
    from specgguf.drafters.ngram_options import NgramOptions

    opts = NgramOptions.from_flags(
        {"--spec-ngram-map-k-size-n": 4, "--spec-ngram-simple-size-n": 5}
    )
    rec = recommend([row(PLAIN, 1.0), row(NG, 1.3)], ngram=opts)
    # only the recommended type's non-default options, spelled as `run` takes them
    assert rec.command == "specgguf run --spec-type ngram-simple --spec-ngram-simple-size-n 5"
    assert NgramOptions().flags_for(["ngram-simple", "ngram-mod"]) == []
