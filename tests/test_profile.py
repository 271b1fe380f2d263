"""The machine's cost profile (specgguf.auto.profile): the pure module (merging, JSON, files, keys),
`AdaptivePolicy.seed` / `export_profile` on synthetic rounds, then `run --spec-draft-n-max auto`
and `bench` on the tiny models, which read and write it under $SPECGGUF_PROFILES (a private
folder per test, see conftest.py)."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from specgguf.auto.cost_estimator import CostEstimator
from specgguf.auto.policy import AdaptivePolicy
from specgguf.auto.profile import (
    FORMAT,
    MAX_PROFILE_BYTES,
    MAX_WEIGHT,
    PROFILES_ENV,
    CostProfile,
    Estimate,
    load_profile,
    profile_key,
    profile_path,
    profiles_dir,
    save_profile,
)
from specgguf.core.rounds import Round

FAST = ["-t", "1", "-c", "512", "-fa", "off"]
PROMPT = ["-p", "the cat sat on", "-n", "24", "--temp", "0"]


def profile(verify=None, draft=None, step=None) -> CostProfile:
    """A CostProfile from {k: (value, weight)} and {name: (value, weight)}."""
    return CostProfile(
        {k: Estimate(*vw) for k, vw in (verify or {}).items()},
        {n: Estimate(*vw) for n, vw in (draft or {}).items()},
        step,
    )


# -- Estimate / CostProfile --------------------------------------------------------------------


def test_estimate_merge_weights_by_samples():
    e = Estimate(1.0, 1.0).merged(Estimate(2.0, 3.0))
    assert e.value == pytest.approx(1.75)
    assert e.weight == pytest.approx(4.0)
    # symmetric in the weights, not in order
    assert Estimate(2.0, 3.0).merged(Estimate(1.0, 1.0)).value == pytest.approx(1.75)
    # a weightless side does not move the other
    assert Estimate(5.0, 0.0).merged(Estimate(2.0, 2.0)).value == pytest.approx(2.0)
    # nothing on either side: the newer value, still weightless
    assert Estimate(5.0, 0.0).merged(Estimate(2.0, 0.0)) == Estimate(2.0, 0.0)


def test_estimate_merge_caps_the_weight():
    e = Estimate(1.0, 30.0).merged(Estimate(2.0, 30.0))
    assert e.value == pytest.approx(1.5)  # the value is the true weighted mean ...
    assert e.weight == MAX_WEIGHT  # ... but it never counts more than MAX_WEIGHT samples
    # so new measurements keep moving a heavily merged estimate
    heavy = Estimate(1.0, 1000.0).merged(Estimate(1.0, 1000.0))
    moved = heavy.merged(Estimate(1.2, 10.0))  # (within the drift threshold: see DRIFT)
    assert moved.value == pytest.approx((1.0 * MAX_WEIGHT + 1.2 * 10) / (MAX_WEIGHT + 10))
    assert Estimate(1.0, 2.0).merged(Estimate(1.0, 3.0), cap=4.0).weight == 4.0


def test_cost_profile_merge_per_width_and_per_drafter():
    old = profile({1: (1.5, 2.0), 2: (2.0, 4.0)}, {"draft-simple": (0.5, 2.0)}, step=70.0)
    new = profile({2: (1.0, 4.0), 3: (2.5, 1.0)}, {"draft-simple": (0.2, 2.0), "x": (0.1, 1)})
    m = old.merged(new)
    assert set(m.verify) == {1, 2, 3}
    assert m.verify[1] == Estimate(1.5, 2.0)  # only the old side knows width 1
    assert m.verify[2].value == pytest.approx(1.5) and m.verify[2].weight == pytest.approx(8.0)
    assert m.verify[3] == Estimate(2.5, 1.0)  # only the new side knows width 3
    assert m.draft["draft-simple"].value == pytest.approx(0.35)
    assert m.draft["draft-simple"].weight == pytest.approx(4.0)
    assert m.draft["x"] == Estimate(0.1, 1.0)
    assert m.target_step_ms == 70.0  # the newer one has none: the old one's is kept
    assert old.merged(profile(step=50.0)).target_step_ms == 50.0  # else the newer one wins
    # merging does not modify either side
    assert old.verify[2] == Estimate(2.0, 4.0) and set(old.verify) == {1, 2}
    assert new.verify[2] == Estimate(1.0, 4.0)


def test_cost_profile_json_round_trip():
    p = profile({1: (1.23456, 3.0), 4: (2.5, 40.0)}, {"draft-simple": (0.125, 6.5)}, step=71.234)
    obj = p.to_json()
    assert obj["format"] == FORMAT
    back = CostProfile.from_json(json.loads(json.dumps(obj)))
    assert back == p
    assert CostProfile.from_json(profile().to_json()) == profile()  # empty is well formed


@pytest.mark.parametrize(
    "obj",
    [
        None,
        "garbage",
        "",
        42,
        [1, 2, 3],
        {},  # no format
        {"format": FORMAT + 1, "verify": {}, "draft": {}},
        {"format": str(FORMAT)},
        {"format": FORMAT, "verify": {"0": [1.0, 1.0]}},  # k < 1
        {"format": FORMAT, "verify": {"-2": [1.0, 1.0]}},
        {"format": FORMAT, "verify": {"x": [1.0, 1.0]}},
        {"format": FORMAT, "verify": {"1.5": [1.0, 1.0]}},
        {"format": FORMAT, "verify": {"1": [-1.0, 1.0]}},  # negative cost
        {"format": FORMAT, "verify": {"1": [1.0, -1.0]}},  # negative weight
        {"format": FORMAT, "draft": {"draft-simple": [-0.5, 1.0]}},
        {"format": FORMAT, "draft": {"draft-simple": [0.5, -3.0]}},
        {"format": FORMAT, "verify": {"1": [float("nan"), 1.0]}},
        {"format": FORMAT, "verify": {"1": [float("inf"), 1.0]}},
        {"format": FORMAT, "verify": {"1": ["a", "b"]}},
        {"format": FORMAT, "verify": {"1": 5}},
        {"format": FORMAT, "verify": {"1": None}},
        {"format": FORMAT, "verify": [[1, 1.0, 1.0]]},
        {"format": FORMAT, "draft": "draft-simple"},
        {"format": FORMAT, "target_step_ms": "fast"},
        {"format": FORMAT, "target_step_ms": [1.0]},
        {"format": True},  # a bool is not the format number
        {"format": FORMAT, "verify": {"1": "12"}},  # a string is not [value, weight]
        {"format": FORMAT, "verify": {"1": [1.0, 1.0, 1.0]}},
        {"format": FORMAT, "target_step_ms": -5.0},
        {"format": FORMAT, "target_step_ms": float("nan")},
    ],
)
def test_from_json_rejects_malformed_profiles(obj):
    assert CostProfile.from_json(obj) is None


@pytest.mark.parametrize(
    "entry",
    [[1.5], [], {}, {"value": 1.5, "weight": 2.0}],
    ids=["one-element", "empty-list", "empty-dict", "dict"],
)
def test_from_json_rejects_truncated_estimates(entry):
    """A damaged file may hold an estimate that is not a [value, weight] pair; that is a
    malformed profile (None), not an exception."""
    assert CostProfile.from_json({"format": FORMAT, "verify": {"1": entry}}) is None
    assert CostProfile.from_json({"format": FORMAT, "draft": {"draft-simple": entry}}) is None


# -- files -------------------------------------------------------------------------------------


def test_load_profile_returns_none_for_missing_invalid_or_wrong_shape(tmp_path):
    assert load_profile(tmp_path / "missing.json") is None
    assert load_profile(tmp_path) is None  # a folder, not a file
    cases = {
        "invalid.json": "{not json",
        "empty.json": "",
        "list.json": "[1, 2]",
        "string.json": '"profile"',
        "wrong_format.json": json.dumps({"format": 99, "verify": {}}),
        "bad_width.json": json.dumps({"format": FORMAT, "verify": {"0": [1.0, 1.0]}}),
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        assert load_profile(tmp_path / name) is None, name
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    assert load_profile(tmp_path / "binary.json") is None
    good = profile({1: (1.5, 3.0)}, {"draft-simple": (0.5, 3.0)}, 70.0)
    (tmp_path / "good.json").write_text(json.dumps(good.to_json()), encoding="utf-8")
    assert load_profile(tmp_path / "good.json") == good


def test_a_profile_past_the_bound_is_ignored_before_it_is_read_whole(tmp_path):
    good = profile({1: (1.5, 3.0)}, {"draft-simple": (0.5, 3.0)}, 70.0)
    text = json.dumps(good.to_json())
    path = tmp_path / "p.json"
    path.write_text(text + " " * (MAX_PROFILE_BYTES - len(text)), encoding="utf-8")
    assert load_profile(path) == good  # at the bound: read
    path.write_text(text + " " * (MAX_PROFILE_BYTES + 1 - len(text)), encoding="utf-8")
    assert load_profile(path) is None  # one byte past it: ignored
    # and the next save replaces the damaged file with a profile that loads
    assert save_profile(path, good) and load_profile(path) == good


def test_a_profile_nested_past_the_parser_is_ignored(tmp_path):
    path = tmp_path / "p.json"
    path.write_text("[" * 200_000, encoding="utf-8")  # RecursionError in json, not ValueError
    assert load_profile(path) is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_or_a_device_in_place_of_the_profile_neither_blocks_nor_streams(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    got: list = []
    reader = threading.Thread(target=lambda: got.append(load_profile(fifo)), daemon=True)
    reader.start()
    reader.join(60)  # an open() that waits for a writer would wait for ever
    blocked = reader.is_alive()
    if blocked:  # let the stuck open return, so that the thread ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert not blocked and got == [None]
    endless = tmp_path / "zero.json"
    endless.symlink_to("/dev/zero")
    assert load_profile(endless) is None


def test_load_profile_of_a_truncated_estimate_is_none(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"format": FORMAT, "verify": {"1": [1.5]}}), encoding="utf-8")
    assert load_profile(path) is None


def test_save_profile_creates_folders_and_merges_with_the_existing_file(tmp_path):
    path = tmp_path / "a" / "b" / "p.json"
    first = profile({1: (1.0, 2.0)}, {"draft-simple": (0.4, 2.0)}, 70.0)
    assert save_profile(path, first) is True
    assert load_profile(path) == first
    second = profile({1: (2.0, 2.0), 2: (3.0, 1.0)}, {"draft-simple": (0.2, 2.0)}, 60.0)
    assert save_profile(path, second) is True
    got = load_profile(path)
    assert got.verify[1].value == pytest.approx(1.5) and got.verify[1].weight == pytest.approx(4)
    assert got.verify[2] == Estimate(3.0, 1.0)
    assert got.draft["draft-simple"].value == pytest.approx(0.3)
    assert got.draft["draft-simple"].weight == pytest.approx(4.0)
    assert got.target_step_ms == 60.0
    # repeated saves: the weight grows to MAX_WEIGHT and stays there
    for _ in range(30):
        save_profile(path, profile({1: (1.5, 2.0)}))
    assert load_profile(path).verify[1].weight == MAX_WEIGHT
    assert sorted(p.name for p in path.parent.iterdir()) == ["p.json"]  # no temp files left


def test_save_profile_replaces_a_damaged_file(tmp_path):
    path = tmp_path / "p.json"
    path.write_text("garbage{", encoding="utf-8")
    new = profile({2: (1.2, 1.0)}, step=5.0)
    assert save_profile(path, new) is True
    assert load_profile(path) == new
    assert json.loads(path.read_text(encoding="utf-8"))["format"] == FORMAT


def test_save_profile_is_atomic_when_the_write_fails(tmp_path, monkeypatch):
    """The file is written beside the target and renamed over it: a failed write leaves the old
    profile whole and no temporary file behind, and is reported as False, not raised."""
    path = tmp_path / "p.json"
    old = profile({1: (1.0, 2.0)}, step=70.0)
    assert save_profile(path, old)
    before = path.read_bytes()

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    assert save_profile(path, profile({1: (9.0, 9.0)})) is False
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]


def test_save_profile_returns_false_when_the_folder_cannot_be_created(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder", encoding="utf-8")
    assert save_profile(blocker / "sub" / "p.json", profile({1: (1.0, 1.0)})) is False
    assert save_profile(blocker / "p.json", profile({1: (1.0, 1.0)})) is False
    assert blocker.read_text(encoding="utf-8") == "not a folder"
    # a folder where the file should be: not writable either, still no exception
    (tmp_path / "dir.json").mkdir()
    assert save_profile(tmp_path / "dir.json", profile({1: (1.0, 1.0)})) is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.json", "file"]


# -- keys and paths ----------------------------------------------------------------------------


def load_like(model, draft=None, **kw) -> SimpleNamespace:
    """What profile_key reads of specgguf.loading.session.LoadOptions."""
    attrs = dict(
        model=model,
        model_draft=draft,
        n_gpu_layers="auto",
        n_gpu_layers_draft="auto",
        threads=2,
        threads_draft=0,
        flash_attn="auto",
        n_ubatch=512,
        repack=True,
        cache_type_k="f16",
        cache_type_v="f16",
        cache_type_k_draft="f16",
        cache_type_v_draft="f16",
    )
    attrs.update(kw)
    return SimpleNamespace(**attrs)


@pytest.fixture
def models(tmp_path):
    target, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    target.write_bytes(b"T" * 100)
    draft.write_bytes(b"D" * 50)
    return target, draft


def test_profile_key_is_stable_for_identical_inputs(models):
    target, draft = models
    key = profile_key(load_like(target, draft))
    assert key == profile_key(load_like(target, draft))
    assert key == profile_key(load_like(Path(str(target)), Path(str(draft))))
    assert len(key) == 16 and all(c in "0123456789abcdef" for c in key)
    # attributes the key does not read (n_ctx) do not change it
    assert key == profile_key(load_like(target, draft, n_ctx=4096))


def test_profile_key_follows_the_model_files(models):
    target, draft = models
    key = profile_key(load_like(target, draft))
    assert profile_key(load_like(target)) != key  # no draft model
    assert profile_key(load_like(draft, target)) != key  # swapped roles
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    touched = profile_key(load_like(target, draft))
    assert touched != key  # the same file, rewritten (another quantization, a new pull)
    # the size alone: the draft grows, its mtime is set back to what it was
    st = draft.stat()
    with open(draft, "ab") as f:
        f.write(b"more")
    os.utime(draft, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert draft.stat().st_mtime_ns == st.st_mtime_ns
    assert profile_key(load_like(target, draft)) != touched


@pytest.mark.parametrize(
    "change",
    [
        {"n_gpu_layers": "0"},
        {"n_gpu_layers": "99"},
        {"n_gpu_layers_draft": "0"},
        {"threads": 1},
        {"threads_draft": 1},
        {"flash_attn": "off"},
        {"n_ubatch": 256},
        {"repack": False},
        {"cache_type_k": "f32"},
        {"cache_type_v_draft": "q8_0"},
    ],
)
def test_profile_key_follows_how_the_models_run(models, change):
    target, draft = models
    assert profile_key(load_like(target, draft, **change)) != profile_key(load_like(target, draft))


def test_profile_path_is_under_the_profiles_folder(models, tmp_path, monkeypatch):
    target, draft = models
    load = load_like(target, draft)
    monkeypatch.setenv(PROFILES_ENV, str(tmp_path / "profiles"))
    assert profiles_dir() == tmp_path / "profiles"
    assert profile_path(load) == tmp_path / "profiles" / f"{profile_key(load)}.json"
    monkeypatch.delenv(PROFILES_ENV)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert profiles_dir() == tmp_path / "home" / ".cache" / "specgguf" / "profiles"


# -- AdaptivePolicy.seed / export_profile (synthetic rounds) -----------------------------------

STEP_MS = 10.0
# a 2-core CPU where the draft model cannot pay even at 100% acceptance
CPU_PROFILE = {1: (1.6, 5.0), 2: (2.1, 5.0), 3: (2.6, 5.0), 4: (3.1, 5.0)}
CPU_DRAFT = {"draft-simple": (0.5, 5.0)}
# a GPU: wider passes cost little more than a plain step, drafts are cheap
GPU_PROFILE = {1: (1.05, 5.0), 2: (1.1, 5.0), 3: (1.15, 5.0), 4: (1.2, 5.0)}
GPU_DRAFT = {"draft-simple": (0.1, 5.0)}


@dataclass
class FakeDrafter:
    """A model drafter as AdaptivePolicy.attach sees it."""

    name: str = "draft-simple"
    max_draft: int = 8
    asks_per_token: bool = True
    free: bool = False
    timing: object | None = None


def drive(policy: AdaptivePolicy, rounds: int, *, curve, draft: float, accept_all: bool):
    """A speculative loop without a model: the machine costs `curve[k]` plain steps for a pass
    over 1 + k tokens and `draft` per draft step; proposals are all accepted or all rejected.
    Returns the budgets the policy gave, round by round."""
    from specgguf.core.draft import DraftTiming

    d = FakeDrafter()
    policy.attach([d])
    ks = []
    for _ in range(rounds):
        k = min(policy.budget(16), d.max_draft, policy.allowance(d.name))
        ks.append(k)
        proposed = 0
        for pos in range(k):
            if not policy.continue_drafting(d.name, pos, 0.95 if accept_all else 0.3):
                break
            proposed += 1
        decodes = proposed + (proposed < k)
        if decodes:  # the drafter's own timing: one decode per proposal (+ a refused one)
            step = draft * STEP_MS
            d.timing = DraftTiming(step, 1, step * (decodes - 1), decodes - 1, proposed)
        n_acc = proposed if accept_all else 0
        policy.observe(
            Round(
                drafter=d.name if proposed else None,
                proposed=list(range(proposed)),
                n_accepted=n_acc,
                emitted=list(range(n_acc + 1)),
                draft_ms=draft * proposed * STEP_MS,
                verify_ms=curve[proposed] * STEP_MS,
            )
        )
    return ks


def curve_of(prof: dict[int, tuple[float, float]], cap: int = 8) -> list[float]:
    known = {0: 1.0, **{k: v for k, (v, _) in prof.items()}}
    slope = known[4] - known[3]
    return [known[k] if k in known else known[4] + slope * (k - 4) for k in range(cap + 1)]


def test_a_hopeless_profile_skips_every_probe():
    """Seeded with a profile that says draft 0.5, verify 1.6..3.1 (no k pays even at 100%
    acceptance), auto never drafts, not even the initial probes; unseeded, it probes."""
    cpu = curve_of(CPU_PROFILE)
    seeded = AdaptivePolicy(n_max_cap=8)
    seeded.seed(profile(CPU_PROFILE, CPU_DRAFT))
    assert seeded.seeded
    ks = drive(seeded, 80, curve=cpu, draft=0.5, accept_all=True)
    assert ks == [0] * 80
    assert seeded.probes == 0
    assert seeded.summary()["drafters"]["draft-simple"]["hopeless"]

    cold = AdaptivePolicy(n_max_cap=8)
    ks = drive(cold, 80, curve=cpu, draft=0.5, accept_all=True)
    assert ks[:4] == [0, 0, 1, 2]  # the probes the profile saves
    assert cold.probes >= 2


def test_a_hopeless_profile_stops_the_ladder_at_widths_it_does_not_know():
    """Widths 1 and 2 and the draft cost are enough to tell that no k can pay: the widths 3
    and 4 the profile lacks are not probed either."""
    cpu = curve_of(CPU_PROFILE)
    policy = AdaptivePolicy(n_max_cap=8)
    policy.seed(profile({k: CPU_PROFILE[k] for k in (1, 2)}, CPU_DRAFT))
    assert drive(policy, 40, curve=cpu, draft=0.5, accept_all=True) == [0] * 40
    assert policy.probes == 0


def test_a_gpu_profile_skips_the_probe_ladder_and_drafts():
    gpu = curve_of(GPU_PROFILE)
    seeded = AdaptivePolicy(n_max_cap=8)
    seeded.seed(profile(GPU_PROFILE, GPU_DRAFT))
    ks = drive(seeded, 60, curve=gpu, draft=0.1, accept_all=True)
    assert ks[:2] == [0, 0]  # the plain step is measured: the unit of every cost
    assert ks[2] > 0  # then it drafts right away ...
    assert ks[2:6] != [1, 2, 3, 4]  # ... without walking the probe ladder
    assert sum(ks[-20:]) / 20 >= 4  # and with everything accepted, drafts long

    cold = AdaptivePolicy(n_max_cap=8)
    assert drive(cold, 6, curve=gpu, draft=0.1, accept_all=True) == [0, 0, 1, 2, 3, 4]


def test_profile_widths_with_few_samples_are_probed_again():
    gpu = curve_of(GPU_PROFILE)
    light = {k: (v, AdaptivePolicy.KNOWN_WEIGHT - 1) for k, (v, _) in GPU_PROFILE.items()}
    policy = AdaptivePolicy(n_max_cap=8)
    policy.seed(profile(light, GPU_DRAFT))
    assert drive(policy, 6, curve=gpu, draft=0.1, accept_all=True) == [0, 0, 1, 2, 3, 4]
    # well-known widths, but the draft cost unknown: the ladder measures it
    policy = AdaptivePolicy(n_max_cap=8)
    policy.seed(profile(GPU_PROFILE))
    assert drive(policy, 6, curve=gpu, draft=0.1, accept_all=True)[2] > 0


def test_widths_between_the_warm_ups_are_not_probed():
    """The warm-up timed 2- and 5-token passes moments ago (one sample each, CostProfile.
    fresh): the ladder's widths 1..4 lie between them and are not probed, while the same
    light estimates read from a stored profile are (the test above)."""
    gpu = curve_of(GPU_PROFILE)
    light = {k: (v, 1.0) for k, (v, _) in GPU_PROFILE.items() if k in (1, 4)}
    warmed = profile(light, {"draft-simple": (0.1, 1.0)})
    warmed.stored, warmed.fresh = False, frozenset({1, 4})
    policy = AdaptivePolicy(n_max_cap=8)
    policy.seed(warmed)
    ks = drive(policy, 6, curve=gpu, draft=0.1, accept_all=True)
    assert ks[:2] == [0, 0] and ks[2:] != [1, 2, 3, 4] and min(ks[2:]) > 0  # drafts at once


def test_seed_caps_the_weight_of_priors():
    """A profile counts as at most PRIOR_WEIGHT samples: this run's measurements soon win."""
    policy = AdaptivePolicy(n_max_cap=4)
    policy.seed(profile({1: (3.0, 1000.0)}))
    n = int(CostEstimator.PRIOR_WEIGHT)
    for _ in range(2):  # the first round follows the prompt and is not a sample
        policy.observe(Round(None, [], 0, [1], 0.0, STEP_MS))
    for _ in range(n):  # width 1 measured at 1.0 plain steps
        policy.observe(Round("draft-simple", [5], 1, [5, 6], 0.0, STEP_MS))
    assert policy.summary()["verify_cost_rel"]["1"] == pytest.approx((3.0 + 1.0) / 2)


def test_seed_ignores_none_widths_past_the_cap_and_weightless_estimates():
    policy = AdaptivePolicy(n_max_cap=4)
    policy.seed(None)
    assert not policy.seeded
    # (widths past the widest auto prices, MAX_WIDTH, are not usable)
    policy.seed(profile({65: (1.1, 10.0), 2: (1.1, 0.0)}, {"draft-simple": (0.1, 0.0)}))
    assert not policy.seeded  # nothing usable
    assert policy.summary()["verify_cost_rel"] == {}
    ks = drive(policy, 6, curve=curve_of(GPU_PROFILE), draft=0.1, accept_all=True)
    assert ks == [0, 0, 1, 2, 3, 4]


def test_export_profile_has_only_what_this_run_measured():
    policy = AdaptivePolicy(n_max_cap=8)
    policy.seed(profile({3: (1.2, 10.0)}, {"draft-simple": (0.9, 10.0), "ngram-x": (0.3, 10.0)}))
    assert policy.export_profile() is None  # nothing measured yet: the priors are not news
    from specgguf.core.draft import DraftTiming

    d = FakeDrafter()
    policy.attach([d])
    for _ in range(3):  # plain steps: the unit (the first one is not a sample)
        policy.observe(Round(None, [], 0, [1], 0.0, STEP_MS))
    assert policy.export_profile() is None  # only the unit: nothing to keep
    for _ in range(4):  # width 1 at 1.5 plain steps, draft step 0.25 (as the drafter timed it)
        d.timing = DraftTiming(0.25 * STEP_MS, 1, 0.0, 0, 1)
        policy.observe(Round("draft-simple", [7], 1, [7, 8], 0.25 * STEP_MS, 1.5 * STEP_MS))
    out = policy.export_profile()
    assert out is not None
    assert set(out.verify) == {1}  # measured; width 3 came from the profile
    assert out.verify[1].value == pytest.approx(1.5)
    assert out.verify[1].weight == 4.0  # one sample per round
    assert "ngram-x" not in out.draft  # a prior, never measured here
    assert out.draft["draft-simple"].value == pytest.approx(0.25)  # not blended with 0.9
    assert 1.0 <= out.draft["draft-simple"].weight <= 4.0
    assert out.target_step_ms == pytest.approx(STEP_MS)
    # the export survives a round trip through the file format
    assert CostProfile.from_json(json.loads(json.dumps(out.to_json()))) is not None


def test_export_profile_without_a_plain_step_is_none():
    policy = AdaptivePolicy(n_max_cap=4)
    for _ in range(4):
        policy.observe(Round("draft-simple", [7], 1, [7, 8], 2.0, 15.0))
    assert policy.export_profile() is None  # costs are relative to a plain step


# -- the CLI on the tiny models ----------------------------------------------------------------


@pytest.fixture
def profiles() -> Path:
    return Path(os.environ[PROFILES_ENV])


@pytest.fixture
def run(tiny_target, tiny_draft, capsys):
    """run(*args) -> (exit code, stdout, stderr) of `specgguf run -m T -md D <fast> *args`."""
    from specgguf_cli.app import run_cli

    def _run(*args):
        argv = ["run", "-m", str(tiny_target), "-md", str(tiny_draft), *FAST, *map(str, args)]
        code = run_cli(argv)
        out = capsys.readouterr()
        return code, out.out, out.err

    return _run


def json_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json"))


def test_auto_run_writes_one_profile(run, profiles):
    code, out, err = run(*PROMPT, "--spec-draft-n-max", "auto")
    assert code == 0, err
    files = json_files(profiles)
    assert len(files) == 1
    assert sorted(p.name for p in profiles.iterdir()) == [files[0].name]  # no temp files
    prof = load_profile(files[0])
    assert prof is not None
    assert "draft-simple" in prof.draft or prof.verify
    assert all(1 <= k <= 8 for k in prof.verify)
    assert prof.target_step_ms is not None and prof.target_step_ms > 0


def test_auto_profile_is_at_the_path_of_the_run_load_options(
    run, profiles, tiny_target, tiny_draft
):
    """`run` files the profile under the key of the LoadOptions it builds (what `bench` uses
    too): the same models, -t, -fa, ... find the same file."""
    from specgguf_cli import options as o

    code, _, err = run(*PROMPT, "--spec-draft-n-max", "auto")
    assert code == 0, err
    load = o.load_options(
        tiny_target,
        tiny_draft,
        n_gpu_layers=o.NGL.default,
        n_gpu_layers_draft=o.NGLD.default,
        ctx_size=512,
        batch_size=o.Batch.default,
        flash_attn="off",
        threads=1,
        threads_draft=o.ThreadsDraft.default,
        no_repack=False,
        verbose=False,
    )
    assert json_files(profiles) == [profile_path(load)]


def test_no_auto_profile_neither_writes_nor_reads(run, profiles):
    code, plain_out, err = run(*PROMPT, "--spec-draft-n-max", "auto", "--no-auto-profile")
    assert code == 0, err
    assert list(profiles.iterdir()) == []
    # a profile that exists is not read either (nor rewritten)
    code, out, err = run(*PROMPT, "--spec-draft-n-max", "auto")
    assert code == 0, err
    [path] = json_files(profiles)
    before = path.read_bytes()
    code, out2, err = run(*PROMPT, "--spec-draft-n-max", "auto", "--no-auto-profile")
    assert code == 0, err
    assert "with this machine's profile" not in err
    assert path.read_bytes() == before
    assert out == out2 == plain_out


def test_a_garbage_profile_does_not_fail_the_run_and_is_replaced(run, profiles):
    code, first, err = run(*PROMPT, "--spec-draft-n-max", "auto")
    assert code == 0, err
    [path] = json_files(profiles)
    path.write_text("\x00garbage{{{", encoding="utf-8")
    code, second, err = run(*PROMPT, "--spec-draft-n-max", "auto")
    assert code == 0, err
    assert second == first
    assert json_files(profiles) == [path]
    assert load_profile(path) is not None


@pytest.mark.parametrize(
    "content",
    [
        '{"format": 1, "verify": {"1": [1.5]}}',
        '{"format": 1, "verify": {"1": {}}}',
        '{"format": 1, "draft": {"draft-simple": []}}',
    ],
    ids=["one-element", "dict", "empty"],
)
def test_a_truncated_profile_entry_does_not_fail_the_run(run, profiles, content):
    code, first, err = run(*PROMPT, "--spec-draft-n-max", "auto")
    assert code == 0, err
    [path] = json_files(profiles)
    path.write_text(content, encoding="utf-8")
    code, second, err = run(*PROMPT, "--spec-draft-n-max", "auto")
    assert code == 0, err
    assert second == first
    assert load_profile(path) is not None


def test_a_seeded_auto_run_is_lossless(run, profiles):
    args = (*PROMPT, "--spec-draft-n-max", "auto")
    code, plain, err = run(*PROMPT, "--spec-type", "none")
    assert code == 0, err
    code, cold, err = run(*args)
    assert code == 0, err
    assert "with this machine's profile" not in err
    assert json_files(profiles)
    code, warm, err = run(*args)
    assert code == 0, err
    assert "with this machine's profile" in err  # it did start from the profile
    assert warm == cold == plain


def test_a_seeded_run_starts_from_a_hopeless_profile_without_probing(run, profiles):
    """A profile that says the draft model cannot pay on this machine (whatever the tiny
    models really cost) keeps the next run from drafting at all: the file is read."""
    code, first, err = run(*PROMPT, "--spec-draft-n-max", "auto", "--no-warmup", "--json")
    assert code == 0, err
    assert json.loads(first)["auto"]["probes"] > 0  # cold, and no warm-up timed: it probes
    [path] = json_files(profiles)
    hopeless = profile(
        {k: (v, 40.0) for k, (v, _) in CPU_PROFILE.items()}, {"draft-simple": (5.0, 40.0)}
    )
    path.write_text(json.dumps(hopeless.to_json()), encoding="utf-8")
    code, second, err = run(*PROMPT, "--spec-draft-n-max", "auto", "--json")
    assert code == 0, err
    auto = json.loads(second)["auto"]
    assert auto["profile_seeded"] is True
    assert auto["probes"] == 0 and set(auto["chosen_k"]) == {"0"}
    assert json.loads(second)["text"] == json.loads(first)["text"]


def test_a_hopeless_profile_leaves_the_draft_model_unloaded_then_re_checks_it(run, profiles):
    """Where the profile says the draft cannot pay even at 100% acceptance, `run` under auto
    does not load it (one line, and in --json), and every RECHECK_RUNS-th run loads it and
    measures it again; a fixed --spec-draft-n-max always loads it."""
    from specgguf.auto.preload import RECHECK_RUNS

    args = (*PROMPT, "--spec-draft-n-max", "auto", "--json")
    code, first, err = run(*args)
    assert code == 0, err
    [path] = json_files(profiles)
    hopeless = profile(
        {k: (v, 40.0) for k, (v, _) in CPU_PROFILE.items()}, {"draft-simple": (5.0, 40.0)}
    )
    path.write_text(json.dumps(hopeless.to_json()), encoding="utf-8")
    for n in range(1, RECHECK_RUNS):
        code, out, err = run(*args)
        assert code == 0, err
        obj = json.loads(out)
        assert "the draft model is not loaded" in err and "x" in err
        assert "cannot pay here" in obj["draft_model_skipped"]
        assert obj["draft_model"] is None and "draft-simple" not in obj["spec_type"]
        assert obj["text"] == json.loads(first)["text"]  # lossless all the same
        assert load_profile(path).skipped_loads == {"draft-simple": n}
    code, out, err = run(*args)  # the re-check: loaded, its cost measured again
    assert code == 0, err
    obj = json.loads(out)
    assert "not loaded" not in err and "draft_model_skipped" not in obj
    assert obj["auto"]["drafters"]["draft-simple"]["draft_cost_rel"] is not None
    assert load_profile(path).skipped_loads == {}
    path.write_text(json.dumps(hopeless.to_json()), encoding="utf-8")
    code, out, err = run(*PROMPT, "--spec-draft-n-max", "3", "--json")
    assert code == 0, err
    assert "not loaded" not in err and json.loads(out)["draft_model"] is not None


def test_fixed_n_max_writes_no_profile(run, profiles):
    code, _, err = run(*PROMPT, "--spec-draft-n-max", "3")
    assert code == 0, err
    assert list(profiles.iterdir()) == []


def test_an_unwritable_profiles_folder_does_not_fail_the_run(run, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setenv(PROFILES_ENV, str(blocker / "profiles"))
    code, out, err = run(*PROMPT, "--spec-draft-n-max", "auto")
    assert code == 0, err
    assert out.strip()
    assert blocker.read_text(encoding="utf-8") == "x"


def test_bench_saves_the_profile_run_reads(tiny_target, tiny_draft, profiles, capsys, run):
    from specgguf_cli.app import run_cli

    args = ["bench", "-m", str(tiny_target), "-md", str(tiny_draft), *FAST]
    args += ["-p", "the cat sat on", "-n", "8", "--json", "--no-warmup"]
    args += ["--spec-type", "draft-simple:auto"]
    code = run_cli([*args, "--no-auto-profile"])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    assert list(profiles.iterdir()) == []
    code = run_cli(args)
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    [path] = json_files(profiles)
    prof = load_profile(path)
    assert prof is not None and prof.verify and prof.target_step_ms
    # `run` with the same load options finds that very file (and merges into it)
    code, _, err = run(*PROMPT, "--spec-draft-n-max", "auto")
    assert code == 0, err
    assert json_files(profiles) == [path]
    assert "with this machine's profile" in err
