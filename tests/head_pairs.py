"""What the header-check tests of the hidden-state heads (EAGLE-3, DFlash) share: a tiny
target and a head built once per module, and the one-line refusal a mismatched pair gets."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from specgguf.errors import SpecggufError
from specgguf.modelfiles.gguf_info import GGUFInfo, read_gguf_info
from tests.hearing import FREQUENT
from tests.tiny_eagle3 import build_eagle3_target
from tests.tiny_models import TARGET_SEED


def build_pair(
    tmp_path_factory, name: str, build_head: Callable[[Path], Path]
) -> tuple[Path, Path]:
    """(target, head) in a fresh folder `name`: the tiny llama target and `build_head`'s head."""
    d = tmp_path_factory.mktemp(name)
    return build_eagle3_target(d / "t.gguf", seed=TARGET_SEED), build_head(d / "h.gguf")


def refusal(check: Callable[[GGUFInfo, GGUFInfo], object], head, target) -> SpecggufError:
    """The error `check` raises on the pair's headers, asserted to be one line."""
    with pytest.raises(SpecggufError) as err:
        check(read_gguf_info(head), read_gguf_info(target))
    assert "\n" not in str(err.value)
    return err.value


def target_and_heads(
    tmp_path_factory, name: str, build_head: Callable[..., Path], stem: str, **more
) -> dict[str, Path]:
    """The drafter tests' models, built once per module in a fresh folder `name`: "target", a
    "random" head and a "d2t" head mapping its rows onto the target's FREQUENT tokens (files
    `stem`.gguf and `stem`-d2t.gguf), and each of `more` (key: its builder on a path)."""
    d = tmp_path_factory.mktemp(name)
    models = {
        "target": build_eagle3_target(d / "target.gguf", seed=TARGET_SEED),
        "random": build_head(d / f"{stem}.gguf"),
        "d2t": build_head(d / f"{stem}-d2t.gguf", d2t=FREQUENT, seed=3),
    }
    return models | {key: build(d / f"{key}.gguf") for key, build in more.items()}
