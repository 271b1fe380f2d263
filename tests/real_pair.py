"""What the tests on the real Qwen2.5-Coder pair share: their marks (selected with `-m real`,
skipped until `specgguf pull`) and a session over the pair with a given speculation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from specgguf.loading.session import LoadOptions, Session, SpecOptions
from specgguf.modelfiles.models import DRAFT, TARGET, is_present, model_path

#: a real-pair module's `pytestmark`
REAL_PAIR = [
    pytest.mark.real,
    pytest.mark.skipif(
        not (is_present(TARGET) and is_present(DRAFT)), reason="run `specgguf pull` first"
    ),
]


def pair_session(spec: SpecOptions) -> Iterator[Session]:
    """A module fixture's body: the pair loaded with `spec`, closed after the module."""
    s = Session(LoadOptions(model=model_path(TARGET), model_draft=model_path(DRAFT),
                            n_ctx=1024), spec)  # fmt: skip
    yield s
    s.close()
