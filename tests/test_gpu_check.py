"""The GPU check's pieces, and the whole of it on tiny models with the CPU build (--cpu-smoke).

No GPU is needed: the CUDA build only runs on a GPU machine, but what it builds from (the
trimmed source), what it installs (the wheels), the models it writes and the measurements it
makes are all exercised here.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import gpu_check  # noqa: E402
import gpu_models  # noqa: E402

# -- the synthetic models ---------------------------------------------------------------------


def test_the_7b_shape_is_qwen25_7b_sized() -> None:
    shape = gpu_models.SHAPES["7b"]
    n = sum(math.prod(s) for _, s, _ in gpu_models.tensor_plan(shape, shape.n_layer))
    assert 7.5e9 < n < 7.7e9  # Qwen2.5-7B: 7.6B parameters with its untied output head
    draft = sum(math.prod(s) for _, s, _ in gpu_models.tensor_plan(shape, 2))
    assert draft / n < 0.25  # embeddings + head + 2 layers


def test_layer_scales_follow_the_wanted_agreement() -> None:
    shape = gpu_models.SHAPES["7b"]
    for agreement in (0.6, 0.8, 0.95):
        d = gpu_models.Design("7b", 2, agreement)
        s_shared, s_upper = gpu_models.layer_scales(d, shape)
        shared, upper = 2 * s_shared**2, (shape.n_layer - 2) * s_upper**2
        rho = math.sqrt(shared / (shared + upper))
        assert 1 - math.acos(rho) / math.pi == pytest.approx(agreement)


def test_draft_shares_the_targets_tensors_and_files_are_reused(tmp_path) -> None:
    from gguf import GGUFReader

    info = gpu_models.build(tmp_path, gpu_models.Design("tiny", 2, 0.8))
    assert not info["reused"]
    t = {x.name: np.array(x.data) for x in GGUFReader(info["target"]).tensors}
    d = {x.name: np.array(x.data) for x in GGUFReader(info["draft"]).tensors}
    shape = gpu_models.SHAPES["tiny"]
    assert len([n for n in t if n.endswith("ffn_down.weight")]) == shape.n_layer
    assert set(d) < set(t) and "blk.2.ffn_up.weight" not in d
    for name in d:
        assert np.array_equal(t[name], d[name]), name
    # the layers write into the second half of the hidden state only
    assert not t["blk.3.attn_output.weight"][: shape.n_embd // 2].any()
    assert not t["token_embd.weight"][:, shape.n_embd // 2 :].any()
    # the same design is not written twice; another one is
    assert gpu_models.build(tmp_path, gpu_models.Design("tiny", 2, 0.8))["reused"]
    assert not gpu_models.build(tmp_path, gpu_models.Design("tiny", 1, 0.8))["reused"]


def _tensors(path: str) -> dict[str, np.ndarray]:
    from gguf import GGUFReader

    return {x.name: np.array(x.data, dtype=np.float32) for x in GGUFReader(path).tensors}


def test_the_head_passes_specgguf_eagle3_checks_against_its_target(tmp_path) -> None:
    from specgguf.binding.llama_ext import LAYER_INPUT_ARCHS
    from specgguf.heads.eagle3_info import check_eagle3_pair
    from specgguf.modelfiles.gguf_info import read_gguf_info

    info = gpu_models.build(tmp_path, gpu_models.Design("tiny", 2, 0.8))
    target = read_gguf_info(info["target"])
    assert target.architecture in LAYER_INPUT_ARCHS  # its layer inputs can be heard
    head = check_eagle3_pair(read_gguf_info(info["head"]), target)
    shape = gpu_models.SHAPES["tiny"]
    assert head.target_layers == gpu_models.head_layers(shape.n_layer)
    assert head.n_embd == head.target_hidden_size == shape.n_embd
    assert head.borrows == ["token embeddings", "lm_head"] and not head.has_d2t
    # a stale pair without a head is written again
    Path(info["head"]).unlink()
    assert not gpu_models.build(tmp_path, gpu_models.Design("tiny", 2, 0.8))["reused"]


def _rms_norm(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x) + gpu_models.RMS_EPS)


def test_the_head_names_a_successor_of_its_token_at_every_step(tmp_path) -> None:
    """The head's graph in numpy, each row attending to itself (as its scores make it): the
    two best tokens are the two successors of the token it reads, at the first step (from
    the target's rows) and at the next (from its own state, the previous token taken out)."""
    info = gpu_models.build(tmp_path, gpu_models.Design("tiny", 2, 0.8))
    t, h = _tensors(info["target"]), _tensors(info["head"])
    shape = gpu_models.SHAPES["tiny"]
    n, hd = shape.n_embd, shape.n_embd // shape.n_head
    group = shape.n_head // shape.n_head_kv
    _, _, _, first_word, _ = gpu_models.vocabulary(shape.n_vocab)
    w = gpu_models.Weights(gpu_models.Design("tiny", 2, 0.8), shape, first_word)
    emb, out = t["token_embd.weight"], t["output.weight"]
    rng = np.random.default_rng(3)

    def step(token: int, g: np.ndarray) -> np.ndarray:
        x = np.concatenate([_rms_norm(emb[token]), _rms_norm(g)])
        q = (h["blk.0.attn_q.weight"] @ x).reshape(shape.n_head, hd)
        k = (h["blk.0.attn_k.weight"] @ x).reshape(shape.n_head_kv, hd)
        v = (h["blk.0.attn_v.weight"] @ x).reshape(shape.n_head_kv, hd)
        self_score = float(q[0] @ k[0]) / math.sqrt(hd)
        other = _rms_norm(emb[rng.integers(first_word, shape.n_vocab - 1)])
        k_other = h["blk.0.attn_k.weight"][:hd, :n] @ other
        assert self_score - float(q[0] @ k_other) / math.sqrt(hd) > 20  # it sees itself alone
        heads = np.concatenate([v[i // group] for i in range(shape.n_head)])
        return g + h["blk.0.attn_output.weight"] @ heads  # the FFN adds nothing

    def best_two(state: np.ndarray) -> set[int]:
        logits = out @ _rms_norm(state)
        return set(np.argsort(logits)[-2:].tolist())

    def successors(token: int) -> set[int]:
        i = token - first_word
        return {int(w.succ1[i]), int(w.succ2[i])}

    # the target's three layer inputs at P: the token at P in A, what the layers wrote in B
    b_std = gpu_models.HeadWeights(w).feature_b_std
    row = emb[first_word + 5].copy()
    row[n // 2 :] = rng.standard_normal(n - n // 2) * b_std
    features = np.concatenate([row, row, row])
    g = h["fc.weight"] @ features
    assert not g[: n // 2].any()  # the fused row carries no token into A
    hits = 0
    for a, b in rng.integers(first_word, shape.n_vocab - 1, size=(20, 2)):
        s1 = step(int(a), g)
        s2 = step(int(b), s1)
        hits += best_two(s1) == successors(int(a))
        hits += best_two(s2) == successors(int(b))
    assert hits >= 38, hits


# -- trimming and wheels ----------------------------------------------------------------------


def test_trim_keeps_what_a_cuda_build_needs_and_drops_the_rest(tmp_path) -> None:
    top = "llama_cpp_python-0.3.36/"
    v = "vendor/llama.cpp/"
    kept = [
        "llama_cpp/llama_cpp.py", "llama_cpp/lib/.keep", v + "CMakeLists.txt",
        v + "src/llama.cpp", v + "ggml/src/ggml.c", v + "ggml/src/ggml-cuda/mmq.cu",
        v + "ggml/src/ggml-cpu/arch/x86/quants.c", v + "ggml/include/ggml.h",
        v + "vendor/CMakeLists.txt", v + "vendor/nlohmann/CMakeLists.txt",
        v + "vendor/hash/sha1/sha1.c", v + "cmake/common.cmake",
    ]  # fmt: skip
    dropped = [
        "llama_cpp/server/app.py", "docs/index.md", "examples/x.py", v + "models/ggml-vocab.gguf",
        v + "ggml/src/ggml-vulkan/vk.cpp", v + "ggml/src/ggml-metal/m.m", v + "tools/server.cpp",
        v + "tests/test.cpp", v + "vendor/nlohmann/json.hpp", v + "vendor/cpp-httplib/h.cpp",
        v + ".git", v + "docs/build.md", v + "common/common.cpp",
    ]  # fmt: skip
    sdist = tmp_path / "s.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        for name in kept + dropped + ["../escape.txt"]:
            data = b"x"
            ti = tarfile.TarInfo(top + name if not name.startswith("..") else name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    dest = tmp_path / "src"
    stats = gpu_check.trim(sdist, dest)
    got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert got == sorted(kept) and stats["files"] == len(kept)
    assert not (tmp_path / "escape.txt").exists()


def _wheel(path: Path, module: str) -> None:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{module}/__init__.py", f"NAME = {path.name!r}\n")


def test_install_wheels_picks_what_fits_this_python(tmp_path) -> None:
    here = f"cp{sys.version_info.major}{sys.version_info.minor}"
    wheels = tmp_path / "w"
    wheels.mkdir()
    _wheel(wheels / "purepkg-1.0-py3-none-any.whl", "purepkg")
    _wheel(wheels / "purepkg-1.10-py3-none-any.whl", "purepkg")  # the newest one wins
    _wheel(wheels / f"binpkg-2.0-{here}-{here}-manylinux_2_17_x86_64.whl", "binpkg")
    _wheel(wheels / "binpkg-2.0-cp27-cp27mu-manylinux1_x86_64.whl", "binpkg_old")
    _wheel(wheels / "macpkg-1.0-cp312-cp312-macosx_11_0_arm64.whl", "macpkg")
    _wheel(wheels / "numpy-2.0-py3-none-any.whl", "numpy_fake")
    site = tmp_path / "site"
    chosen = gpu_check.install_wheels(wheels, site)
    assert [c.split("-")[:2] for c in chosen] == [["binpkg", "2.0"], ["purepkg", "1.10"]]
    assert "1.10" in (site / "purepkg/__init__.py").read_text()
    assert (site / "purepkg/__init__.py").is_file() and (site / "binpkg/__init__.py").is_file()
    assert not (site / "macpkg").exists() and not (site / "numpy_fake").exists()


# -- the summary ------------------------------------------------------------------------------


def _bench_config(label: str, tps: float, ratio: float, accept: float) -> dict:
    return {"label": label, "tokens_per_second": {"median": tps},
            "ratio_to_plain": {"median": ratio}, "same_text_as_plain": {"identical": 6, "runs": 6},
            "accept_rate": accept, "mean_acceptance_length": 1 + 4 * accept}  # fmt: skip


def test_the_summary_shows_the_tree_next_to_its_chain() -> None:
    chain, tree = (label for label, _ in gpu_check.TREE_SHAPES)
    res = {"tree": {
        chain: {"same_text": True, "accept_rate": 0.5, "tree_rounds": 0, "tree_nodes": 0,
                "tree_off_chain": 0, "bench": _bench_config("draft-simple n_max=5", 50, 1.5, 0.5)},
        tree: {"same_text": True, "accept_rate": 0.7, "tree_rounds": 10, "tree_nodes": 115,
               "tree_off_chain": 4, "bench": _bench_config("draft-simple n_max=5", 60, 1.8, 0.7)},
    }}  # fmt: skip
    lines = gpu_check.summary(res).splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("draft tree vs chain"))
    assert f"--spec-draft-n-max {gpu_check.TREE_DEPTH}" in lines[head]
    assert lines[head + 3].split() == [chain, "50.0", "1.500", "0.500", "3.000", "6/6", "0", "-",
                                       "0"]  # fmt: skip
    assert lines[head + 4].split() == [*tree.split(), "60.0", "1.800", "0.700", "3.800", "6/6",
                                       "10", "11.50", "4"]  # fmt: skip
    assert lines[head + 5] == f"  run: greedy speculative text == plain: {chain} True, {tree} True"


def test_the_trace_digest_counts_plain_rounds_by_reason_and_where_they_fell(tmp_path) -> None:
    """What a lease brings back for auto's traced runs: its plain rounds, auto's reasons for
    them (a round allowed a draft that proposed nothing is told apart), where they fell, how
    far the draft model was behind then, the tokens of a drafting round, verify ms by width."""
    def rec(i: int, proposed: int, emitted: int, k: int, why: str, behind: int, ms: float):
        return {"round": i, "proposed": [7] * proposed, "emitted": [7] * emitted,
                "verify_ms": ms, "auto": {"k": k, "why": why, "behind": {"draft-simple": behind}}}
    rows = [{"round": 0, "proposed": [], "emitted": [1], "verify_ms": 1.0, "from_prompt": True},
            rec(1, 0, 1, 0, "first rounds: measuring this width", 9, 7.0),
            rec(2, 0, 1, 0, "first rounds: measuring this width", 10, 7.2),
            rec(3, 4, 5, 4, "plan", 11, 9.0), rec(4, 4, 3, 4, "plan", 1, 9.4),
            rec(5, 0, 1, 4, "plan", 3, 6.8),  # allowed 4, the gate stopped the first token
            rec(6, 0, 1, 0, "catch-up not repaid in the tokens left", 40, 7.0),
            rec(7, 0, 1, 0, "catch-up not repaid in the tokens left", 41, 7.0)]  # fmt: skip
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    d = gpu_check.trace_digest(path)
    assert d["rounds"] == 7 and d["plain"] == 5 and d["plain_at"] == "1-2, 5-7"
    assert d["plain_why"] == {"first rounds: measuring this width": 2,
                              "catch-up not repaid in the tokens left": 2,
                              "allowed, none proposed": 1}  # fmt: skip
    assert d["most_behind_at_plain"] == 41 and d["tokens_per_drafting_round"] == 4.0
    assert d["verify_ms"] == {0: 7.0, 4: 9.2}
    # the summary prints it under the traced prompt, from results.json's reading of it
    res = {"auto_traced": {"long": {"tokens_per_second": 200.0, "report": ["auto: 7 rounds"],
                                    "rounds": json.loads(json.dumps(d))}}}  # fmt: skip
    out = gpu_check.summary(res)
    assert "    rounds 7, plain 5 (at 1-2, 5-7); why: first rounds: measuring this width 2, " in out
    assert "behind by up to 41 tokens" in out and "verify ms by width 0:7.0 4:9.2" in out


def test_the_tree_row_is_a_tree_next_to_the_same_chain() -> None:
    """The shapes the check runs: a chain, and the tree the GPU run is asked about."""
    shapes = dict(gpu_check.TREE_SHAPES)
    assert shapes["chain"] == ("--spec-tree-topk", "1")
    assert list(shapes.values())[1] == ("--spec-tree-topk", "4", "--spec-tree-nodes", "12")
    assert gpu_check.TREE_DEPTH == 5


# -- the whole check on the CPU ---------------------------------------------------------------


@pytest.mark.slow
def test_cpu_smoke_runs_the_whole_check(tmp_path) -> None:
    env = {**os.environ, "SPECGGUF_GPU_WORK": str(tmp_path), "PYTHON": sys.executable}
    env.pop("OUT", None)
    p = subprocess.run(
        ["bash", str(ROOT / "scripts/gpu_check.sh"), "--cpu-smoke"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    out = p.stdout
    assert "== specgguf GPU check (CPU smoke: tiny shapes) ==" in out
    for kind in ("draft-simple", "draft-eagle3"):
        assert f"run      {kind}: greedy speculative text == plain: True" in out, kind
    assert "offload  target: all 5 layers on CPU, draft: all 3 layers on CPU" in out
    curve = next(ln for ln in out.splitlines() if ln.startswith("  n  "))
    assert curve.split()[1:] == [str(n) for n in range(1, 17)]
    for kind in ("draft-simple", "draft-eagle3"):
        for label in [*(f"{kind} n_max={k}" for k in range(2, 9)), f"{kind} auto"]:
            assert f"  {label} " in out, label
    # the plain reference and the control row shown once, though each bench measures plain
    assert out.count(f"  {'none':<24} ") == 1 and out.count("  none (control) ") == 1
    res = json.loads((tmp_path / "results/results.json").read_text())
    assert len(res["cost_curve"]["pass_cost_rel"]) == 16
    # the draft shares the target's first layers: it agrees far more often than chance; the
    # head names one of the target's two candidates (a random head agrees almost never)
    assert res["runs"]["draft-simple"]["accept_rate"] > 0.3
    assert res["runs"]["draft-eagle3"]["accept_rate"] > 0.1
    assert res["eagle3_check"]["compatible"] is True
    assert set(res["bench"]) == {"draft-simple", "draft-eagle3"}
    assert {o["in_place"]["temp"] for o in res["overhead"]} == {0.0, 0.8}
    assert res["head_step"]["rel"]["EAGLE-3 head"] > 0
    assert res["head_step"]["rel"]["EAGLE-3 head (-md)"] > 0
    assert "EAGLE-3 head x" in out and "draft-eagle3 next to draft-simple: acceptance" in out
    assert (tmp_path / "results/summary.txt").read_text().strip() == out.strip()
    # the tree row: the same text as plain, really a tree, next to a chain that is not one
    chain, tree = (res["tree"][label] for label, _ in gpu_check.TREE_SHAPES)
    assert chain["same_text"] and tree["same_text"]
    assert chain["tree_rounds"] == 0 < tree["tree_rounds"]
    assert chain["bench"]["label"] == tree["bench"]["label"] == "draft-simple n_max=5"
    assert chain["bench"]["accept_rate"] > 0 and tree["bench"]["accept_rate"] > 0
    assert chain["bench"]["same_text_as_plain"]["identical"] == \
        chain["bench"]["same_text_as_plain"]["runs"]
    assert tree["bench"]["same_text_as_plain"]["identical"] == \
        tree["bench"]["same_text_as_plain"]["runs"]
    assert "draft tree vs chain: draft-simple at --spec-draft-n-max 5" in out
    for label, _ in gpu_check.TREE_SHAPES:
        assert f"  {label} " in out, label
