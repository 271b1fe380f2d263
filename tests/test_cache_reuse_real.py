"""`--cache-reuse` on the real Qwen2.5-Coder target (select with `-m real`; needs `specgguf
pull`): an editor's consecutive fill-in-the-middle prompts, laid out as /infill lays them
out with the FIM presets' batch (the window of lines above the cursor moves, the text after
it stays), evaluate only the typed line and the hole around it.

Their text is not compared with a fresh evaluation's: a moved chunk's cells were computed
after other text than what now precedes it, the approximation the option accepts (as
llama-server's does), so the two may part anywhere, not only at near-ties (seen here: a part
where the reused run's token was not among the fresh run's best two). Exactness where it
holds, on a one-layer model whose cells depend only on their own token and position, is
tests/test_cache_reuse.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgguf.io.fim import Budget, ExtraChunk, FimTokens, infill_prompt
from specgguf.loading.session import LoadOptions, Session, SpecOptions
from specgguf.modelfiles.models import TARGET, is_present, model_path
from tests.near_tie import greedy

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(not is_present(TARGET), reason="run `specgguf pull` first"),
]

#: the file an editor types in: this repository's generator, a stretch in its middle
SOURCE = Path(__file__).resolve().parent.parent / "specgguf" / "generator.py"
N = 24


def editor_prompts(session: Session, lines: list[str], first: int, count: int) -> list[list]:
    """llama.vim's prompts on `count` new lines from `first` (blank lines: empty `prompt`),
    the file's head as the ring chunk, in the FIM presets' budget (-b 1024)."""
    model = session.target_model

    def plain(text: str) -> list[int]:
        return model.tokenize(text, add_special=False, parse_special=False)

    fim = FimTokens(**model.fim)
    suffix = "\n" + "".join(lines[first + count : first + count + 64])
    extra = [ExtraChunk(SOURCE.name, "".join(lines[:32]))]
    budget = Budget(1024, -1, session.target.n_ctx)
    return [
        infill_prompt(fim, plain, "".join(lines[max(0, i - 256) : i]), suffix, extra=extra,
                      budget=budget)
        for i in range(first, first + count)
    ]  # fmt: skip


def test_editor_prompts_reuse_the_suffix_and_write_the_fresh_text():
    load = LoadOptions(model=model_path(TARGET), n_ctx=4096, n_batch=1024, cache_reuse=64)
    session = Session(load, SpecOptions(types=[]))
    try:
        lines = SOURCE.read_text(encoding="utf-8").splitlines(keepends=True)
        prompts = editor_prompts(session, lines, len(lines) // 2, 3)
        warm = [greedy(session, p, N) for p in prompts]
        for (_, stats), p in zip(warm[1:], prompts[1:], strict=True):
            # the typed line, the hole before the suffix and the middle token, not the suffix
            assert stats.cache_n > len(p) - 64, (stats.cache_n, stats.prompt_n, len(p))
        assert all(0 < len(got) <= N for got, _ in warm)
    finally:
        session.close()
