"""`--spec-type suffix` (specgguf.drafters.suffix): drafting from earlier requests' outputs,
frequency-scored continuations, the corpus's bounds and eviction, and one corpus per namespace
(a server's API key) that no other namespace reads."""

from __future__ import annotations

import random

import pytest

from specgguf.drafters.ngram_params import SuffixParams
from specgguf.drafters.registry import SPEC_TYPES, BuildContext
from specgguf.drafters.suffix import MAX_PER_KEY, SuffixCorpus, SuffixDrafter
from specgguf.errors import UsageError

WRAPPER = [900, 901, 902, 903, 904, 905, 906, 907]  # e.g. '<tool_call>\n{"name": "write_file"'


def drafter(corpus: SuffixCorpus | None = None, **kw) -> SuffixDrafter:
    return SuffixDrafter(SuffixParams(**kw), corpus)


def run_request(d: SuffixDrafter, prompt: list[int], output: list[int]) -> None:
    d.begin(prompt)
    d.observe(output)


def test_an_earlier_requests_output_is_drafted_in_a_later_request():
    corpus = SuffixCorpus(1000)
    d = drafter(corpus)
    run_request(d, [1, 2, 3], [50, 51, *WRAPPER, 60])
    d.begin([7, 8, 9])  # a new request: the first one's output is now in the corpus
    assert corpus.n_outputs == 1
    d.observe([50, 51, 900])
    # matched on 3 tokens: a draft of up to 3 (SPEC_FACTOR 1.0), the wrapper's next tokens
    assert d.propose(16).tokens == [901, 902, 903]
    d.observe([901, 902, 903, 904, 905])
    assert d.propose(16).tokens == [906, 907, 60]  # the match grew: more to copy


def test_the_current_sequence_is_drafted_from_too():
    d = drafter()
    d.begin([5, 6, 7, 8, 9, 10, 11, 1, 2, 3])
    d.observe([5, 6, 7, 8])
    assert d.propose(8).tokens == [9, 10, 11, 1]
    assert d.peek(8).tokens == [9, 10, 11, 1]  # peek is propose without consequences


def test_continuations_are_scored_by_frequency():
    corpus = SuffixCorpus(10_000)
    d = drafter(corpus)
    for tail in ([70, 71, 72], [70, 71, 72], [80, 81, 82]):
        run_request(d, [0], [10, 11, 12, *tail])
    d.begin([0])
    d.observe([10, 11, 12])
    assert d.propose(8).tokens == [70, 71, 72]  # two outputs against one


def test_a_contested_continuation_stops_the_draft():
    corpus = SuffixCorpus(10_000)
    d = drafter(corpus)
    for nxt in (70, 71, 72, 73):
        run_request(d, [0], [10, 11, 12, nxt, 5, 5, 5, 5])
    d.begin([0])
    d.observe([10, 11, 12])
    assert d.propose(8).tokens == []  # four outputs, four different next tokens


def test_the_corpus_keeps_at_most_its_tokens_oldest_first():
    corpus = SuffixCorpus(100)
    rng = random.Random(0)
    for i in range(50):
        corpus.add([1000 + i, *(rng.randrange(500) for _ in range(29))])
    assert corpus.n_tokens <= 100
    assert corpus.n_outputs == 3
    # the index forgets what was dropped: a key of the first output finds nothing
    assert corpus.draft([1000], 8, 8) == (0, [])
    index = corpus._index
    assert set(index.seqs) == {47, 48, 49}
    assert all(sid in index.seqs for dq in index._keys.values() for sid, _ in dq)
    assert all(len(dq) <= MAX_PER_KEY for dq in index._keys.values())


def test_an_output_longer_than_the_corpus_keeps_its_end():
    corpus = SuffixCorpus(10)
    corpus.add(list(range(100)))
    assert corpus.n_tokens == 10
    assert corpus.draft([94, 95], 8, 8)[1] == [96, 97]


def test_a_zero_sized_corpus_keeps_nothing():
    d = drafter(cache_tokens=0)
    run_request(d, [0], [10, 11, 12, 13])
    d.begin([0])
    assert d.corpus.n_outputs == 0


def test_namespaces_never_share_a_corpus(tiny_target):
    from specgguf.core.sampling import SamplerParams
    from specgguf.loading.session import LoadOptions, Session, SpecOptions

    spec = SpecOptions(types=["suffix"])
    session = Session(LoadOptions(model=tiny_target, n_ctx=256), spec)
    try:
        a = session.suffix_corpus(spec, ("api-key", "a"))
        assert session.suffix_corpus(spec, ("api-key", "a")) is a
        assert session.suffix_corpus(spec, ("api-key", "b")) is not a
        assert session.suffix_corpus(spec, None) is not a
        d = session.decoder(SamplerParams(temp=0), 4, 1, namespace=("api-key", "a")).drafters[0]
        assert d.escaped is None  # one longest-match lookup over the prompt and its views
        d = d.inner
        assert isinstance(d, SuffixDrafter) and d.corpus is a
    finally:
        session.close()


def test_the_registry_row_and_flags():
    row = SPEC_TYPES["suffix"]
    assert row.free and not row.needs_model
    d = row.build(BuildContext(ngram={"max_depth": 12}))
    assert d.name == "suffix" and d.max_draft == 12
    with pytest.raises(UsageError, match="--spec-suffix-max-depth"):
        SuffixParams(max_depth=0)
    with pytest.raises(UsageError, match="--spec-suffix-cache-tokens"):
        SuffixParams(cache_tokens=-1)


def test_drafting_from_earlier_requests_keeps_greedy_text(tiny_target):
    """The second time a prompt comes, its whole answer is in the corpus: drafted and accepted,
    and the text is plain decoding's (or parts from it only at a near tie, as passes of
    other widths may)."""
    from specgguf.core.sampling import SamplerParams
    from specgguf.loading.session import LoadOptions, Session, SpecOptions
    from tests.near_tie import assert_same_or_near_tie
    from tests.test_batched import NEAR_TIE

    load = LoadOptions(model=tiny_target, n_ctx=512)
    plain = Session(load, SpecOptions(types=[]))
    spec = Session(load, SpecOptions(types=["suffix"], n_max=8))
    greedy = SamplerParams(temp=0)

    def answer(session: Session, tokens: list[int]):
        dec = session.decoder(greedy, 40, 0)
        out = [t for rnd in dec.generate(tokens) for t in rnd.emitted]
        return out, dec.stats

    try:
        for text in ("the cat sat on the", "a dog ran", "the cat sat on the"):
            tokens = plain.tokenize(text)
            ref, _ = answer(plain, tokens)
            got, stats = answer(spec, tokens)
            assert_same_or_near_tie(plain, tokens, ref, got, NEAR_TIE, label=text)
        # the repeated prompt drafted its answer from the first one's
        assert stats.n_accept >= 20
    finally:
        spec.close()
        plain.close()


def test_forget_drops_the_corpus_and_the_sequence_in_hand():
    corpus = SuffixCorpus(1000)
    d = drafter(corpus)
    run_request(d, [1, 2, 3], [50, 51, *WRAPPER])
    d.begin([0])
    assert corpus.n_outputs == 1
    d.observe([50, 51, 900, 901])
    d.forget()
    assert corpus.n_outputs == 0 and corpus.n_tokens == 0
    d.begin([0])  # the output in hand when it forgot is not kept either
    assert corpus.n_outputs == 0
    d.observe([50, 51, 900])
    assert d.propose(8).tokens == []


def test_bench_runs_do_not_draft_from_each_other(tiny_target):
    """bench measures every run as a new `run`: a prompt measured again drafts nothing of its
    own earlier answer (Generator.forget_outputs after each run)."""
    from specgguf.bench import run_one
    from specgguf.bench.configs import BenchConfig
    from specgguf.core.sampling import SamplerParams
    from specgguf.generator import Generator
    from specgguf.loading.session import LoadOptions, Session, SpecOptions

    session = Session(LoadOptions(model=tiny_target, n_ctx=512), SpecOptions(types=["suffix"]))
    try:
        gen = Generator(session, sampler=SamplerParams(temp=0))
        cfg = BenchConfig(types=("suffix",), n_max=8)
        tokens = gen.tokenize("the cat sat on the")
        kw = {"n_predict": 40, "sampler": SamplerParams(temp=0), "seed": 0, "ignore_eos": True}
        first = run_one(gen, cfg, tokens, **kw)
        again = run_one(gen, cfg, tokens, **kw)
        assert again.tokens == first.tokens
        assert again.timings["draft_n_accepted"] == first.timings["draft_n_accepted"]
        # without forgetting, the same request drafts its whole earlier answer
        for _ in range(2):
            g = gen.generate(tokens, _params(cfg, gen))
            list(g)
        assert g.stats.n_accept > first.timings["draft_n_accepted"] + 20
    finally:
        session.close()


def _params(cfg, gen):
    from specgguf.bench.params import gen_params
    from specgguf.core.sampling import SamplerParams

    return gen_params(
        cfg, gen.spec, n_predict=40, sampler=SamplerParams(temp=0), seed=0, ignore_eos=True
    )


def test_a_servers_api_keys_never_draft_from_each_others_outputs(tiny_target):
    """Over HTTP: a request sent again with the same key drafts its earlier answer from the
    corpus; the same request with another key drafts nothing of it."""
    from tests.serve_helpers import FAST, serving

    gen = serving(
        ["-m", str(tiny_target), *FAST, "-c", "1024", "--spec-type", "suffix",
         "--spec-draft-n-max", "8", "--api-key", "key-a,key-b"]
    )  # fmt: skip
    server = next(gen)
    try:
        body = {"prompt": "the cat sat on the", "n_predict": 40, "cache_prompt": False}

        def accepted(key: str) -> int:
            return server.post("/completion", body, key=key)["timings"]["draft_n_accepted"]

        first = accepted("key-a")
        assert accepted("key-a") > first + 20  # its own earlier answer
        assert accepted("key-b") <= first  # nothing of key-a's
    finally:
        next(gen, None)
