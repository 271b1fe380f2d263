#!/usr/bin/env python3
"""The Python half of scripts/gpu_check.sh (see there): trimming the pinned llama-cpp-python
source, installing the wheels that travel with it, the measurements and the summary.

    python scripts/gpu_check.py trim SDIST.tar.gz DEST
    python scripts/gpu_check.py install-wheels WHEELS_DIR SITE_DIR
    python scripts/gpu_check.py measure --target T --draft D --head H --out DIR [--smoke]
                                        [--ngl all]
    python scripts/gpu_check.py summary DIR

Only the standard library at import time: `trim` and `install-wheels` run before anything
else is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# -- trim ----------------------------------------------------------------------------------

#: what a CPU + CUDA build of libllama needs from the sdist (paths under its top folder);
#: a trailing "/" keeps a whole folder. Everything else (model vocabularies, docs, examples,
#: tools, tests, other GPU backends, .git) stays behind.
KEEP = (
    "llama_cpp/",
    "LICENSE.md",
    "pyproject.toml",
    "vendor/llama.cpp/CMakeLists.txt",
    "vendor/llama.cpp/LICENSE",
    "vendor/llama.cpp/cmake/",
    "vendor/llama.cpp/include/",
    "vendor/llama.cpp/src/",
    "vendor/llama.cpp/licenses/",
    "vendor/llama.cpp/vendor/CMakeLists.txt",
    "vendor/llama.cpp/vendor/hash/",
    "vendor/llama.cpp/ggml/CMakeLists.txt",
    "vendor/llama.cpp/ggml/cmake/",
    "vendor/llama.cpp/ggml/include/",
    "vendor/llama.cpp/ggml/src/ggml-cpu/",
    "vendor/llama.cpp/ggml/src/ggml-cuda/",
)
#: header-only vendored libraries: CMake needs their CMakeLists.txt, libllama none of their code
HEADER_ONLY = {
    f"vendor/llama.cpp/vendor/{lib}/{name}"
    for lib in ("miniaudio", "nlohmann", "sheredom", "stb")
    for name in ("CMakeLists.txt", "LICENSE")
}


def _kept(rel: str) -> bool:
    if rel.startswith("llama_cpp/server/"):
        return False
    if any(rel == k or (k.endswith("/") and rel.startswith(k)) for k in KEEP):
        return True
    # the files directly in ggml/src (the core library), not its other backends' folders
    return rel.rpartition("/")[0] == "vendor/llama.cpp/ggml/src" or rel in HEADER_ONLY


def trim(sdist: Path, dest: Path) -> dict:
    """Extract the kept part of the sdist into dest (replacing it)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    n = size = 0
    with tarfile.open(sdist) as tar:
        for m in tar.getmembers():
            parts = m.name.split("/", 1)
            if len(parts) < 2 or not m.isfile() or not _kept(parts[1]):
                continue
            rel = Path(parts[1])
            if rel.is_absolute() or ".." in rel.parts:
                continue
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            src = tar.extractfile(m)
            assert src is not None
            with src, open(out, "wb") as f:
                shutil.copyfileobj(src, f)
            out.chmod(0o644)
            n += 1
            size += m.size
    return {"files": n, "bytes": size}


# -- wheels --------------------------------------------------------------------------------


def _compatible(wheel: str) -> bool:
    """Whether a wheel file name fits this interpreter (pure, abi3, or this CPython)."""
    m = re.match(r"^(?P<name>.+?)-(?P<ver>[^-]+)(-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-"
                 r"(?P<plat>[^-]+)\.whl$", wheel)  # fmt: skip
    if not m:
        return False
    py, abi, plat = m["py"].split("."), m["abi"], m["plat"]
    if plat == "any":
        return True
    if "x86_64" not in plat or not plat.startswith(("manylinux", "linux")):
        return False
    here = f"cp{sys.version_info.major}{sys.version_info.minor}"
    if abi == "abi3":
        return any(p.startswith("cp3") and int(p[3:]) <= sys.version_info.minor for p in py)
    return here in py


def install_wheels(wheels: Path, site: Path, skip: tuple[str, ...] = ("numpy",)) -> list[str]:
    """Unpack every wheel of `wheels` that fits this Python into `site` (no pip, no network):
    the newest fitting file per distribution."""
    site.mkdir(parents=True, exist_ok=True)
    here = f"cp{sys.version_info.major}{sys.version_info.minor}"

    def rank(whl: Path) -> tuple:
        """A wheel for this exact Python first, then the newest version."""
        parts = whl.name.split("-")
        return (here in parts[-3].split("."), tuple(int(x) for x in re.findall(r"\d+", parts[1])))

    chosen: dict[str, Path] = {}
    for whl in sorted(wheels.glob("*.whl")):
        dist = whl.name.split("-", 1)[0].lower().replace("_", "-")
        if dist in skip or not _compatible(whl.name):
            continue
        if dist not in chosen or rank(whl) > rank(chosen[dist]):
            chosen[dist] = whl
    for whl in chosen.values():
        with zipfile.ZipFile(whl) as z:
            for info in z.infolist():
                rel = Path(info.filename)
                if rel.is_absolute() or ".." in rel.parts:
                    continue
                z.extract(info, site)
    return sorted(w.name for w in chosen.values())


#: bench's prompts: the synthetic models continue any text alike, so they are short (prefill
#: is not what is measured) and differ only in length
PROMPTS = (
    ("short", "Once upon a time"),
    ("medium", "def fibonacci(n):\n    " * 8),
    ("long", "The quick brown fox jumps over the lazy dog. " * 24),
)

#: the drafters measured side by side: the --spec-type, and which file of measure's is its -md
DRAFTERS = (("draft-simple", "draft"), ("draft-eagle3", "head"))
#: the draft lengths each drafter's bench rows run at (and auto beside them)
BENCH_LENGTHS = "2..8"
#: tree vs chain: the target and its draft model (draft-simple) at one depth, once per shape:
#: (label, the shape's flags). Each is a run (text equal to plain, acceptance, the tree's own
#: statistics) and a bench row (its speed against plain in the same bench); the chain row is
#: the same drafter and depth, so the two differ only in the tree
TREE_DEPTH = 5
TREE_SHAPES = (
    ("chain", ("--spec-tree-topk", "1")),
    ("tree topk=4 nodes=12", ("--spec-tree-topk", "4", "--spec-tree-nodes", "12")),
)
#: what a run's --json timings say of its trees (absent: no tree round)
TREE_STATS = ("tree_rounds", "tree_nodes", "tree_off_chain")

# -- measuring -----------------------------------------------------------------------------


def _cli(args: list[str], env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specgguf_cli.app", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def _tree_rows(a: argparse.Namespace, run: list[str], bench: list[str], plain_text: str,
               env: dict) -> dict:
    """TREE_SHAPES, each as a run and a bench row (see there); `run` and `bench` are the
    commands without a drafter, `plain_text` what plain decoding wrote for `run`."""
    rows = {}
    for label, flags in TREE_SHAPES:
        spec = _cli([*run, "-md", a.draft, "--spec-type", "draft-simple", "--spec-draft-n-max",
                     str(TREE_DEPTH), *flags], env)  # fmt: skip
        if spec.returncode != 0:
            raise SystemExit(f"specgguf run ({label}) failed: {spec.stderr.strip()[-400:]}")
        timings = json.loads(spec.stdout)["timings"]
        p = _cli([*bench, "-md", a.draft, "--spec-type", "none", "--spec-type",
                  f"draft-simple:{TREE_DEPTH}", *flags], env, timeout=600)  # fmt: skip
        if p.returncode != 0:
            raise SystemExit(f"specgguf bench ({label}) failed ({p.returncode}): "
                             f"{p.stderr.strip()[-400:]}")  # fmt: skip
        rows[label] = {
            "flags": list(flags),
            "same_text": json.loads(spec.stdout)["text"] == plain_text,
            "accept_rate": timings["accept_rate"],
            **{k: timings.get(k, 0) for k in TREE_STATS},
            "bench": next(r for r in json.loads(p.stdout)["configs"]
                          if r["label"].startswith("draft-simple")),  # not plain nor control
        }
    return rows


def measure(a: argparse.Namespace) -> dict:
    """Everything the summary shows, as one JSON-able dict (also written to out/results.json)."""
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("SPECGGUF_PROFILES", str(out / "profiles"))
    gpu = ["-ngl", a.ngl, "-ngld", a.ngl, "-c", str(a.ctx)]
    if a.threads:
        gpu += ["-t", str(a.threads)]
    res: dict = {"smoke": a.smoke, "started": time.time(), "complete": False}
    # the device tool returns only what is under $OUT when a call runs out of time: each
    # step's results are written there (and to out/) as soon as they exist
    copies = [out / "results.json"] + ([Path(os.environ["OUT"]) / "results.json"]
                                       if os.path.isdir(os.environ.get("OUT", "")) else [])

    def save() -> None:
        for path in copies:
            path.write_text(json.dumps(res, indent=1))

    t_start = time.perf_counter()

    def step(name: str):
        print(f"gpu_check:   +{time.perf_counter() - t_start:.0f}s {name}", file=sys.stderr,
              flush=True)  # fmt: skip
        return time.perf_counter()

    # 1. check: compatibility and where the layers would go; the head passes the same checks
    t0 = step("specgguf check (draft model, EAGLE-3 head)")
    checks = {}
    for kind, role in DRAFTERS:
        p = _cli(["check", "-m", a.target, "-md", getattr(a, role), "-ngl", a.ngl, "-ngld",
                  a.ngl, "--json"], env)  # fmt: skip
        if p.returncode != 0:
            raise SystemExit(f"specgguf check ({kind}) failed ({p.returncode}): {p.stderr.strip()}")
        checks[kind] = json.loads(p.stdout)
    res["check"] = checks["draft-simple"].get("offload")
    head = checks["draft-eagle3"]
    res["eagle3_check"] = {"compatible": head.get("compatible"), "draft": head.get("draft_kind")}
    res["seconds_check"] = round(time.perf_counter() - t0, 1)
    save()

    # 2. one run per drafter: the offload line and greedy text equal to plain decoding
    t0 = step("specgguf run (plain, then each drafter)")
    prompt = "Once upon a time"
    base = ["run", "-m", a.target, *gpu, "-p", prompt, "-n", str(a.n_run), "--temp", "0", "--json"]
    plain = _cli([*base, "--spec-type", "none"], env)
    if plain.returncode != 0:
        raise SystemExit(f"specgguf run (plain) failed: {plain.stderr.strip()[-400:]}")
    jp = json.loads(plain.stdout)
    res["runs"] = {}
    for kind, role in DRAFTERS:
        spec = _cli([*base, "-md", getattr(a, role), "--spec-type", kind, "--spec-draft-n-max",
                     "4"], env)  # fmt: skip
        if spec.returncode != 0:
            raise SystemExit(f"specgguf run ({kind}) failed: {spec.stderr.strip()[-400:]}")
        js = json.loads(spec.stdout)
        off = [ln for ln in spec.stderr.splitlines() if ln.startswith("offload:")]
        res["runs"][kind] = {
            "offload": off[0] if off else None,
            "same_text": js["text"] == jp["text"],
            "accept_rate": js["timings"]["accept_rate"],
            "tokens_per_second": js["timings"]["predicted_per_second"],
            "plain_tokens_per_second": jp["timings"]["predicted_per_second"],
        }
    res["seconds_run"] = round(time.perf_counter() - t0, 1)
    save()

    # 3. in-process: the verify cost curve 1..16, the draft step, the Python overhead
    t0 = step("cost curve 1..16 and Python overhead (in process)")
    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_overhead as bo

    from specgguf.bench import measure_cost_curve
    from specgguf.binding import engine
    from specgguf.loading.session import LoadOptions, Session, SpecOptions

    timer = bo.DecodeTimer(cpu=False)  # an idle GPU machine: wall time
    timer.install(engine.ll)
    load = LoadOptions(Path(a.target), Path(a.draft), n_gpu_layers=a.ngl,
                       n_gpu_layers_draft=a.ngl, n_ctx=a.ctx, threads=a.threads)  # fmt: skip
    session = Session(load, SpecOptions(types=["draft-simple"]))
    try:
        res["offload"] = session.offload()
        tokens = session.tokenize(bo.DEFAULT_PROMPT)
        curve = measure_cost_curve(session, tokens, 15, reps=a.reps)
        res["cost_curve"] = curve.as_dict()
        overhead = []
        for temp in (0.0, 0.8):
            for cfg in a.overhead_configs.split(";"):
                bo.measure(session, cfg, tokens, temp, 8, 1, timer)
                m = bo.measure(session, cfg, tokens, temp, a.n_overhead, 1, timer, "wall")
                w = bo.measure_warm(session, cfg, tokens, temp, 1, a.warm_rounds, timer)
                overhead.append({"in_place": m.as_dict(), "warm": w.as_dict()})
        res["overhead"] = overhead
    finally:
        session.close()
    res["seconds_inprocess"] = round(time.perf_counter() - t0, 1)
    save()

    # 4. specgguf bench per drafter: plain, K = 2..8, auto (plain is in each: the reference
    # its rows' ratios are taken against in that same run); the control row (plain measured
    # again: the noise floor) in the first
    prompts = out / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"class": c, "prompt": p}) + "\n" for c, p in PROMPTS))
    res["bench"] = {}
    bench_base = ["bench", "-m", a.target, *gpu, "-f", str(prompts), "-n", str(a.n_bench),
                  "--repeat", str(a.repeat), "--temp", "0", "--json"]  # fmt: skip
    for kind, role in DRAFTERS:
        t0 = step(f"specgguf bench (plain, {kind}:{BENCH_LENGTHS}, auto)")
        bench = [
            *bench_base, "-md", getattr(a, role),
            *(["--spec-type", "none"] if kind == DRAFTERS[0][0] else []),
            "--spec-type", f"{kind}:{BENCH_LENGTHS}",
            "--spec-type", f"{kind}:auto",
        ]  # fmt: skip
        p = _cli(bench, env, timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"specgguf bench ({kind}) failed ({p.returncode}): "
                             f"{p.stderr.strip()[-400:]}")  # fmt: skip
        res["bench"][kind] = json.loads(p.stdout)
        res[f"seconds_bench_{kind}"] = round(time.perf_counter() - t0, 1)
        save()

    # 4b. auto's decisions, round by round: draft-simple under auto on each prompt, traced
    # (each record's `auto`: the k it allowed and why), with its report lines; the traces
    # travel in $OUT, so a lease that shows auto behind a fixed length also shows where
    t0 = step("auto traced (draft-simple, each prompt)")
    traces = out / "traces"
    traces.mkdir(exist_ok=True)
    res["auto_traced"] = {}
    for cls, prompt in PROMPTS:
        one = out / f"prompt-{cls}.txt"
        one.write_text(prompt)
        trace = traces / f"auto-draft-simple-{cls}.jsonl"
        p = _cli(["run", "-m", a.target, "-md", a.draft, *gpu, "-f", str(one), "-n",
                  str(a.n_bench), "--ignore-eos", "--temp", "0", "--spec-type", "draft-simple",
                  "--spec-draft-n-max", "auto", "--trace", str(trace), "--json"],
                 env)  # fmt: skip
        if p.returncode != 0:
            raise SystemExit(f"specgguf run (auto, {cls}) failed: {p.stderr.strip()[-400:]}")
        run = json.loads(p.stdout)
        res["auto_traced"][cls] = {
            "tokens_per_second": run["timings"].get("predicted_per_second"),
            "report": [ln.strip() for ln in p.stderr.splitlines() if "auto:" in ln],
            "auto": run.get("auto"),
            "rounds": trace_digest(trace),
        }
        if os.path.isdir(os.environ.get("OUT", "")):
            shutil.copy(trace, Path(os.environ["OUT"]) / trace.name)
    res["seconds_auto_traced"] = round(time.perf_counter() - t0, 1)
    save()

    # 5. the draft tree next to the same chain (draft-simple, depth TREE_DEPTH): run and bench
    t0 = step(f"tree vs chain (draft-simple:{TREE_DEPTH}, {len(TREE_SHAPES)} shapes)")
    res["tree"] = _tree_rows(a, base, bench_base, jp["text"], env)
    res["seconds_tree"] = round(time.perf_counter() - t0, 1)
    save()

    # 6. one step of the designed head (its lm_head the target's whole vocabulary) and of a
    # converted head's size (a 32k-token d2t vocabulary), next to the target's and the draft's
    t0 = step("EAGLE-3 head step (scripts/bench_head_step.py)")
    p = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_head_step.py"), "-m", a.target,
         "-md", a.draft, "--head", a.head, "-ngl", a.ngl, "--reps", str(max(5, a.reps * 4)),
         "--json",
         *(["-t", str(a.threads)] if a.threads else [])],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    if p.returncode != 0:
        raise SystemExit(f"bench_head_step failed ({p.returncode}): {p.stderr.strip()[-400:]}")
    res["head_step"] = json.loads(p.stdout)
    res["seconds_head_step"] = round(time.perf_counter() - t0, 1)
    res["complete"] = True
    save()
    return res


# -- summary -------------------------------------------------------------------------------


def _spans(indices: list[int]) -> str:
    """Round numbers as runs: [1, 2, 3, 7, 9, 10] -> "1-3, 7, 9-10"."""
    runs: list[list[int]] = []  # [first, last] of each run
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def trace_digest(path: Path) -> dict:
    """What a `--trace` file of a run under auto says about its rounds: how many, how many
    of them sent no proposal and why auto allowed none (its `auto.why`), where in the run
    they fell, the tokens a drafting round brought, and the mean verify time by width.
    A lease that shows auto behind a fixed length reads here whether the missing speed is
    plain rounds (and their reasons) or short drafts, without another lease."""
    rounds = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    rounds = [r for r in rounds if not r.get("from_prompt")]
    plain_why: dict[str, int] = {}
    plain_at: list[int] = []
    behind = 0  # the most a model drafter was behind at a plain round (a long catch-up?)
    drafted = drafted_tokens = 0
    verify: dict[int, list[float]] = {}
    for r in rounds:
        width = len(r.get("proposed") or [])
        verify.setdefault(width, []).append(float(r.get("verify_ms") or 0.0))
        if width:
            drafted += 1
            drafted_tokens += len(r.get("emitted") or [])
            continue
        auto = r.get("auto") or {}
        why = auto.get("why", "?") if auto.get("k", 0) == 0 else "allowed, none proposed"
        plain_why[why] = plain_why.get(why, 0) + 1
        plain_at.append(int(r.get("round", 0)))
        behind = max([behind, *(auto.get("behind") or {}).values()])
    return {
        "rounds": len(rounds),
        "plain": len(plain_at),
        "plain_why": dict(sorted(plain_why.items(), key=lambda kv: -kv[1])),
        "plain_at": _spans(plain_at),
        "most_behind_at_plain": behind,
        "tokens_per_drafting_round": round(drafted_tokens / drafted, 3) if drafted else None,
        "verify_ms": {w: round(sum(v) / len(v), 3) for w, v in sorted(verify.items())},
    }


def _bench_row(row: dict) -> str:
    """One configuration of a `specgguf bench --json` report as a line of the table."""
    tps = row["tokens_per_second"]["median"] if row["tokens_per_second"] else float("nan")
    ratio = row["ratio_to_plain"]["median"] if row["ratio_to_plain"] else 1.0
    same = row["same_text_as_plain"]
    same_s = f"{same['identical']}/{same['runs']}" if same else "-"
    extra = f"  mean K {row['auto']['mean_k']}" if row.get("auto") else ""
    return (f"  {row['label']:<24} {tps:>8.1f} {ratio:>8.3f} {row['accept_rate']:>7.3f} "
            f"{row['mean_acceptance_length']:>8.3f} {same_s:>9}{extra}")  # fmt: skip


def _tree_summary(tree: dict) -> list[str]:
    """The tree rows next to their chain: bench's columns, then what the run's trees did."""
    if not tree:
        return []
    lines = [f"draft tree vs chain: draft-simple at --spec-draft-n-max {TREE_DEPTH}; x plain: "
             "to the same bench's plain row",
             "  trees, nodes, off: the run's tree rounds, nodes per tree round, and rounds that "
             "kept a branch off the draft's best chain",
             f"  {'shape':<24} {'tok/s':>8} {'x plain':>8} {'accept':>7} {'mean len':>8} "
             f"{'same text':>9} {'trees':>6} {'nodes':>6} {'off':>5}"]  # fmt: skip
    for label, t in tree.items():
        rounds = t["tree_rounds"]
        nodes = f"{t['tree_nodes'] / rounds:.2f}" if rounds else "-"
        lines.append(f"{_bench_row({**t['bench'], 'label': label})} {rounds:>6} {nodes:>6} "
                     f"{t['tree_off_chain']:>5}")  # fmt: skip
    runs = ", ".join(f"{label} {t['same_text']}" for label, t in tree.items())
    lines.append(f"  run: greedy speculative text == plain: {runs}")
    return lines


def _digest_lines(d: dict | None) -> list[str]:
    """trace_digest's findings, for the summary."""
    if not d:
        return []
    why = ", ".join(f"{w} {n}" for w, n in d["plain_why"].items()) or "-"
    ms = " ".join(f"{w}:{v}" for w, v in d["verify_ms"].items())
    return [
        f"rounds {d['rounds']}, plain {d['plain']} (at {d['plain_at'] or '-'}); why: {why}; "
        f"a draft model was behind by up to {d['most_behind_at_plain']} tokens then",
        f"tokens per drafting round {d['tokens_per_drafting_round']}; verify ms by width {ms}",
    ]


def summary(res: dict, phases: dict | None = None) -> str:
    lines = []
    add = lines.append
    env = res.get("environment") or {}
    add("== specgguf GPU check" + (" (CPU smoke: tiny shapes)" if res.get("smoke") else "") + " ==")
    for k in ("gpu", "cuda", "cpus", "python", "models"):
        if env.get(k):
            add(f"{k:<8} {env[k]}")
    if phases:
        add("phase seconds: " + ", ".join(f"{k} {v}" for k, v in phases.items()))
    add(f"offload  {res.get('offload')}")
    ec = res.get("eagle3_check") or {}
    if ec:
        add(f"head     {ec.get('draft')}; compatible: {ec.get('compatible')}")
    for kind, run in (res.get("runs") or {}).items():
        add(f"run      {kind}: greedy speculative text == plain: {run.get('same_text')}; "
            f"acceptance {run.get('accept_rate')}")  # fmt: skip
    c = res.get("cost_curve")
    if c:
        rel = c["pass_cost_rel"]
        add("verify cost: a pass over n tokens / a 1-token pass "
            f"(target step {c['target_step_ms']} ms)")  # fmt: skip
        ns = sorted(rel, key=int)
        add("  n  " + " ".join(f"{int(n):>5}" for n in ns))
        add("  x  " + " ".join(f"{rel[n]:>5.2f}" for n in ns))
        add(f"draft step / target step: {c['draft_step_rel']} ({c['draft_step_ms']} ms)")
    benches = res.get("bench") or {}
    if benches:
        b = next(iter(benches.values()))
        add(f"specgguf bench: -n {b['n_predict']}, --repeat {b['repeat']}, greedy, "
            f"{len(b['prompts'])} prompts; x plain: to the same bench's plain row")  # fmt: skip
        add(f"  {'config':<24} {'tok/s':>8} {'x plain':>8} {'accept':>7} {'mean len':>8} "
            f"{'same text':>9}")  # fmt: skip
        for i, b in enumerate(benches.values()):
            for row in b["configs"]:
                if i and row["label"] == "none":
                    continue  # each bench has its plain reference: shown once
                lines.append(_bench_row(row))
        for kind, b in benches.items():
            rec = b.get("recommendation") or {}
            if rec:
                add(f"  recommendation ({kind}): {rec.get('command')}")
    traced = res.get("auto_traced") or {}
    if traced:
        add("auto traced (draft-simple, --trace in traces/): tok/s and auto's report per prompt")
        for cls, t in traced.items():
            add(f"  {cls}: {t.get('tokens_per_second')} tok/s")
            lines.extend(f"    {ln}" for ln in t.get("report", []))
            lines.extend(f"    {ln}" for ln in _digest_lines(t.get("rounds")))
    lines += _tree_summary(res.get("tree") or {})
    hs = res.get("head_step")
    if hs:
        steps = [f"{k} x{v} ({hs['step_ms'][k]} ms)" for k, v in hs["rel"].items()]
        add("one-token step / target step: " + ", ".join(steps))
    from bench_head_step import GIVEN_HEAD as DESIGNED_HEAD  # the head the check drafts with

    runs = res.get("runs") or {}
    if hs and {"draft-simple", "draft-eagle3"} <= set(runs) and DESIGNED_HEAD in hs["rel"]:
        head, model = runs["draft-eagle3"], runs["draft-simple"]
        add(f"draft-eagle3 next to draft-simple: acceptance {head['accept_rate']} vs "
            f"{model['accept_rate']} (run, K = 4); step x{hs['rel'][DESIGNED_HEAD]} vs "
            f"x{hs['rel']['draft model']} of a target step")  # fmt: skip
    ov = res.get("overhead")
    if ov:
        add("Python overhead per round outside llama_decode (ms; wall in place / CPU warm; "
            "budget 0.3 + 0.1 K, x2 when sampling)")  # fmt: skip
        add(f"  {'config':<20} {'temp':>4} {'mean K':>6} {'in place':>9} {'warm':>7} "
            f"{'budget':>7}  ok")  # fmt: skip
        for o in ov:
            i, w = o["in_place"], o["warm"]
            ok = i["within_budget"] and w["within_budget"]
            add(f"  {i['config']:<20} {i['temp']:>4} {i['mean_k']:>6.2f} "
                f"{i['wall_ms_per_round']:>9.3f} {w['cpu_ms_per_round']:>7.3f} "
                f"{i['budget_ms_per_round']:>7.3f}  {'yes' if ok else 'NO'}")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("trim")
    t.add_argument("sdist", type=Path)
    t.add_argument("dest", type=Path)
    w = sub.add_parser("install-wheels")
    w.add_argument("wheels", type=Path)
    w.add_argument("site", type=Path)
    m = sub.add_parser("measure")
    m.add_argument("--target", required=True)
    m.add_argument("--draft", required=True)
    m.add_argument("--head", required=True, help="the EAGLE-3 head GGUF for the target")
    m.add_argument("--out", required=True)
    m.add_argument("--ngl", default="all")
    m.add_argument("--ctx", type=int, default=4096)
    m.add_argument("--threads", type=int, default=0)
    m.add_argument("--smoke", action="store_true")
    m.add_argument("--reps", type=int, default=5)
    m.add_argument("--n-run", type=int, default=64)
    m.add_argument("--n-bench", type=int, default=128)
    m.add_argument("--n-overhead", type=int, default=96)
    m.add_argument("--warm-rounds", type=int, default=150)
    m.add_argument("--repeat", type=int, default=2)
    m.add_argument("--overhead-configs", default="draft-simple:4;draft-simple:auto;none")
    s = sub.add_parser("summary")
    s.add_argument("dir", type=Path, help="the folder of results.json (and phases.json)")
    a = ap.parse_args(argv)
    if a.cmd == "trim":
        print(json.dumps(trim(a.sdist, a.dest)))
    elif a.cmd == "install-wheels":
        print("\n".join(install_wheels(a.wheels, a.site)))
    elif a.cmd == "measure":
        measure(a)
    else:
        res = json.loads((a.dir / "results.json").read_text())
        extra = {}
        for name in ("environment", "phases"):
            f = a.dir / f"{name}.json"
            extra[name] = json.loads(f.read_text()) if f.is_file() else {}
        res["environment"] = extra["environment"]
        print(summary(res, extra["phases"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
