"""KV prefix reuse: a prompt that starts like what the caches hold evaluates only the rest,
and prints exactly what a fresh context prints (greedy and seeded sampling, with and without
a draft model); `cache_n` / `prompt_n` say how much was reused and evaluated."""

from __future__ import annotations

import json

import pytest
from specgguf_cli.app import run_cli

from specgguf.binding.engine import common_prefix_len
from specgguf.core.sampling import SamplerParams
from specgguf.loading.session import LoadOptions, Session, SpecOptions

GREEDY = SamplerParams(temp=0.0)
WARM = SamplerParams(temp=0.9)


def session(target, draft=None, types=()):
    load = LoadOptions(model=target, model_draft=draft, n_ctx=512, threads=1, flash_attn="off")
    return Session(load, SpecOptions(types=list(types), n_max=4))


def generate(s: Session, tokens: list[int], sampler, *, reuse: bool, n: int = 24, seed: int = 5):
    dec = s.decoder(sampler, n, seed, reuse_prefix=reuse)
    out = [t for rnd in dec.generate(tokens) for t in rnd.emitted]
    return out, dec.stats


def test_common_prefix_len():
    assert common_prefix_len([], [1, 2]) == 0
    assert common_prefix_len([1, 2, 3], [1, 2, 3]) == 3
    assert common_prefix_len([1, 2, 3], [1, 2]) == 2
    assert common_prefix_len([1, 9, 3], [1, 2, 3]) == 1
    assert common_prefix_len([7], [1]) == 0


@pytest.mark.parametrize("sampler", [GREEDY, WARM], ids=["greedy", "seeded"])
@pytest.mark.parametrize("with_draft", [False, True], ids=["plain", "draft-simple"])
def test_second_turn_reuses_the_prefix_and_prints_what_a_fresh_context_prints(
    tiny_target, tiny_draft, sampler, with_draft
):
    types = ["draft-simple"] if with_draft else []
    warm = session(tiny_target, tiny_draft if with_draft else None, types)
    fresh = session(tiny_target, tiny_draft if with_draft else None, types)
    try:
        turn1 = warm.tokenize("the cat sat on the mat and")
        out1, st1 = generate(warm, turn1, sampler, reuse=True)
        assert st1.cache_n == 0 and st1.prompt_n == len(turn1)
        # turn 2 = everything so far + new text, as a chat template renders a conversation
        turn2 = turn1 + out1 + warm.tokenize(" then the dog ran")[1:]
        got, st2 = generate(warm, turn2, sampler, reuse=True)
        ref, st_ref = generate(fresh, turn2, sampler, reuse=False)
        assert got == ref
        # the cache held turn 1 and all but the last emitted token (never evaluated)
        assert st2.cache_n == len(turn1) + len(out1) - 1
        assert st2.prompt_n == len(turn2) - st2.cache_n
        assert st_ref.cache_n == 0 and st_ref.prompt_n == len(turn2)
        if with_draft:
            # the draft context kept its prefix too, and holds the sequence it drafted on
            held = warm.draft_ctx.tokens
            assert held[: len(turn2) - 1] == turn2[:-1]
    finally:
        warm.close()
        fresh.close()


def test_a_different_prompt_evaluates_from_where_it_differs(tiny_target):
    s = session(tiny_target)
    try:
        a = s.tokenize("def main():\n    return 1")
        b = s.tokenize("def main():\n    print(2)")
        generate(s, a, GREEDY, reuse=True, n=8)
        n_common = common_prefix_len(a, b)
        got, st = generate(s, b, GREEDY, reuse=True, n=16)
        assert 0 < st.cache_n <= n_common
        fresh = session(tiny_target)
        try:
            ref, _ = generate(fresh, b, GREEDY, reuse=False, n=16)
        finally:
            fresh.close()
        assert got == ref
        # negative control: without reuse nothing is kept
        _, st_off = generate(s, b, GREEDY, reuse=False, n=4)
        assert st_off.cache_n == 0 and st_off.prompt_n == len(b)
    finally:
        s.close()


def test_jsonl_lines_sharing_a_system_prompt_report_cache_n(tiny_target, tmp_path, capsys):
    system = "You are a terse assistant. " * 6
    lines = [
        {"messages": [{"role": "system", "content": system}, {"role": "user", "content": q}],
         "n_predict": 6, "temperature": 0}
        for q in ("hello there", "what is a cat")
    ]
    f = tmp_path / "in.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    code = run_cli(["run", "-m", str(tiny_target), "--spec-type", "none", "-c", "512",
                    "--jsonl", "-f", str(f), "-q"])  # fmt: skip
    assert code == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert out[0]["timings"]["cache_n"] == 0
    assert out[1]["timings"]["cache_n"] > 20  # the shared system prompt was not evaluated
    assert out[1]["timings"]["prompt_n"] < out[0]["timings"]["prompt_n"]
