"""Shared pytest fixtures: tiny GGUF models built once per session."""

from __future__ import annotations

import pytest

from tests.tiny_models import DRAFT_PERTURB, DRAFT_SEED, TARGET_SEED, build_tiny_model


@pytest.fixture(scope="session")
def tiny_models_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny_models")


@pytest.fixture(scope="session")
def tiny_target(tiny_models_dir):
    """Path of the tiny target model (byte-level BPE vocab, ChatML template)."""
    return build_tiny_model(tiny_models_dir / "target.gguf", seed=TARGET_SEED)


@pytest.fixture(scope="session")
def tiny_draft(tiny_models_dir):
    """The target's weights plus DRAFT_PERTURB relative noise: same vocab, partial agreement."""
    return build_tiny_model(
        tiny_models_dir / "draft.gguf",
        seed=DRAFT_SEED,
        perturb_from_seed=TARGET_SEED,
        perturb_scale=DRAFT_PERTURB,
    )


@pytest.fixture(scope="session")
def tiny_other_vocab(tiny_models_dir):
    """A model whose vocab is incompatible with the target's under llama.cpp's rule."""
    return build_tiny_model(tiny_models_dir / "other.gguf", seed=TARGET_SEED, vocab="other")


@pytest.fixture(autouse=True)
def _private_profiles(tmp_path_factory, monkeypatch):
    """Every test gets its own machine-profile folder ($SPECGGUF_PROFILES): an `auto` run in
    one test must not seed another, nor write into the developer's home."""
    monkeypatch.setenv("SPECGGUF_PROFILES", str(tmp_path_factory.mktemp("profiles")))


@pytest.fixture(scope="session")
def tiny_xvocab(tiny_models_dir):
    """A draft with a second tokenizer (other merges, a token that splits "é", control tokens
    at other ids) and the target's weights: cross-vocabulary drafting's test pair."""
    return build_tiny_model(tiny_models_dir / "xvocab.gguf", seed=TARGET_SEED, vocab="xvocab")
