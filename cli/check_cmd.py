"""`specgguf check`: inspect a model, or a target/draft pair, without loading either.

Loading a 1.5B target only to learn that its draft has another vocabulary wastes a minute
and a gigabyte; everything this command says comes from the GGUF headers (gguf_info), the
compatibility verdict is llama.cpp's own rule (compat), and memory is the estimate of
weights plus an f16 KV cache at -c. The lead registers `check` on the Typer app; the body
lives in `check_report` so a default model pair can be filled in before it is called.
"""

from __future__ import annotations

import json
from dataclasses import replace

import typer
from rich.console import Console
from rich.table import Table

from specgguf.binding.memory_caps import describe, expected_removal
from specgguf.errors import ExitCode, SpecggufError, UsageError
from specgguf.heads.eagle3_info import check_target_role
from specgguf.heads.mtp_info import is_mtp_drafter, mtp_layers, mtp_problem
from specgguf.loading.preflight import draft_kind, resolve_n_ctx
from specgguf.modelfiles.compat import check_compatible
from specgguf.modelfiles.gguf_info import GGUFInfo, MemoryEstimate, estimate_memory, read_gguf_info
from specgguf.modelfiles.vocab_overlap import vocab_overlap

__all__ = ["check", "check_report", "render_report"]


def _memory_dict(mem: MemoryEstimate) -> dict[str, int | None]:
    return {
        "weights_bytes": mem.weights_bytes,
        "kv_bytes": mem.kv_bytes,
        "total_bytes": mem.total_bytes,
    }


def _model_dict(info: GGUFInfo, mem: MemoryEstimate) -> dict[str, object]:
    v = info.vocab
    return {
        "path": info.path,
        "file_size": info.file_size,
        "gguf_version": info.version,
        "architecture": info.architecture,
        "name": info.name,
        "size_label": info.size_label,
        "n_params": info.n_params,
        "quantization": info.quantization,
        "file_type": info.file_type,
        "dominant_type": info.dominant_type,
        "context_length": info.context_length,
        "block_count": info.block_count,
        "embedding_length": info.embedding_length,
        "head_count": info.head_count,
        "head_count_kv": info.head_count_kv,
        "n_tensors": info.n_tensors,
        "tensor_bytes": info.tensor_bytes,
        "vocab": {
            "model": v.model,
            "pre": v.pre,
            "type": v.type,
            "n_vocab": v.n_vocab,
            "add_bos": v.add_bos,
            "bos_id": v.bos_id,
            "add_eos": v.add_eos,
            "eos_id": v.eos_id,
            "eot_id": v.eot_id,
        },
        "chat_template": info.chat_template is not None,
        "memory": _memory_dict(mem),
        # what a rollback will be, from the architecture (run --json says what the probe found)
        "kv_rollback": describe(expected_removal(info.architecture), info.architecture),
        "mtp": _mtp_dict(info),
    }


def _mtp_dict(info: GGUFInfo) -> dict[str, object] | None:
    """The model's own MTP (NextN) layers, and why draft-mtp cannot use them if it cannot;
    None when it declares none."""
    layers = mtp_layers(info)
    if layers is None:
        return None
    return {
        "layers": layers.count,
        "first_block": layers.first_block,
        "summary": layers.describe(),
        "problem": mtp_problem(info),
    }


def _mode(compatible: bool) -> str:
    return "same-vocabulary" if compatible else "cross-vocabulary"


def check_report(
    target_path: str, draft_path: str | None, n_ctx: int | None = None
) -> dict[str, object]:
    """Everything `check` prints, as plain data (the --json object).

    With a draft, `mode` says how `run` will use it: "same-vocabulary" (llama.cpp's rule holds)
    or "cross-vocabulary" (it drafts through text); `vocab_overlap` is the share of the draft's
    tokens whose text is exactly one target token.

    n_ctx as `run` takes -c: None is run's default (4096, capped at the training context), 0
    the target's training context; the draft gets the same context as the target (llama.cpp
    has no separate draft context size any more).
    """
    if n_ctx is not None and n_ctx < 0:
        raise UsageError(f"--ctx-size must be 0 (the model's own) or positive, not {n_ctx}")
    target = read_gguf_info(target_path)
    check_target_role(target)  # a drafter head given as -m: exit 3, as `run` refuses it
    draft = read_gguf_info(draft_path) if draft_path is not None else None
    n_ctx, _ = resolve_n_ctx(n_ctx, target.context_length)
    t_mem = estimate_memory(target, n_ctx)
    target_dict = _model_dict(target, t_mem)
    target_dict["chat_template_render"] = template_check(target, n_ctx)
    report: dict[str, object] = {
        "n_ctx": n_ctx,
        "target": target_dict,
        "draft": None,
        "compatible": None,
        "compatibility": None,
        "mode": None,
        "vocab_overlap": None,
        "draft_kind": None,
        "memory": {
            "n_ctx": n_ctx,
            "target": _memory_dict(t_mem),
            "draft": None,
            "total_bytes": t_mem.total_bytes,
        },
    }
    if draft is not None:
        # a head or an MTP drafter is checked against the target as `run` checks it
        report["draft_kind"] = draft_kind(draft, target)
        d_mem = estimate_memory(draft, n_ctx)
        if is_mtp_drafter(draft):  # it reads the target's cache: none of its own
            d_mem = replace(d_mem, kv_bytes=0)
        compat = check_compatible(target.vocab, draft.vocab)
        report["draft"] = _model_dict(draft, d_mem)
        report["compatible"] = compat.ok
        report["compatibility"] = compat.to_dict()
        report["mode"] = _mode(compat.ok)
        report["vocab_overlap"] = (
            1.0 if compat.ok else round(vocab_overlap(target.vocab, draft.vocab), 4)
        )
        report["memory"] = {
            "n_ctx": n_ctx,
            "target": _memory_dict(t_mem),
            "draft": _memory_dict(d_mem),
            "total_bytes": t_mem.total_bytes + d_mem.total_bytes,
        }
    return report


#: what `run --chat` sends: one user message, then the assistant's turn
SAMPLE_CONVERSATION = [{"role": "user", "content": "Hello! Write a haiku about the sea."}]


def template_check(info: GGUFInfo, n_ctx: int) -> dict[str, object] | None:
    """Render the GGUF's chat template for SAMPLE_CONVERSATION under the limits `run` would
    use at this context size. None without a template; {"ok": False, "error": ...} when it
    does not compile or cannot render in bounds (time, size, depth), so a hostile or broken
    template is found before `run --chat` meets it."""
    from specgguf.chat.template import ChatTemplateError, template_for
    from specgguf.chat.template_bounds import TemplateLimits

    if not info.chat_template:
        return None
    v = info.vocab

    def tok(i):
        return v.tokens[i] if i is not None and 0 <= i < len(v.tokens) else ""

    try:
        template, _ = template_for(
            info.chat_template,
            bos_token=tok(v.bos_id),
            eos_token=tok(v.eos_id),
            add_bos=bool(v.add_bos),
            limits=TemplateLimits.for_context(n_ctx),
        )
        text = template.render(SAMPLE_CONVERSATION, add_generation_prompt=True)
    except ChatTemplateError as e:
        return {"ok": False, "error": str(e), "chars": None}
    return {"ok": True, "error": None, "chars": len(text)}


def offload_report(report: dict, n_gpu_layers: str, n_gpu_layers_draft: str) -> dict:
    """Where -ngl / -ngld would put each model's layers with this build and these devices
    (llama.cpp's rule, specgguf.binding.offload), from the layer counts in the headers: nothing is
    loaded. A build that cannot say (llama-cpp-python missing, a GPU build without its GPU)
    gets a `note` instead of failing the check."""
    from specgguf.binding.offload import describe_placement

    out: dict[str, object] = {"target": None, "draft": None, "note": None}
    try:
        from specgguf.binding import engine
        engine.require_gpu_if_built_for_one()
        devices = engine.backend_devices()
        for role, flag in (("target", n_gpu_layers), ("draft", n_gpu_layers_draft)):
            m = report[role]
            if m is not None and isinstance(m["block_count"], int):
                ngl = engine.parse_gpu_layers(flag)
                out[role] = describe_placement(m["block_count"], ngl, devices)
    except SpecggufError as err:
        if str(err).startswith("invalid value"):
            raise
        out["note"] = str(err)
    return out


def _rpc_placement(report: dict, rpc, device, device_draft, ngl: str, ngld: str) -> str | None:
    """--rpc/-dev/-devd: the workers are probed and each model's layer placement predicted
    (llama.cpp's split rule); added to the report as "rpc" and returned as one "rpc:" line."""
    from specgguf.binding import devices, engine

    layers = {r: (report[r] or {}).get("block_count") for r in ("target", "draft")}
    gl = {"target": engine.parse_gpu_layers(ngl), "draft": engine.parse_gpu_layers(ngld)}
    placed = devices.check_placement(layers, rpc, device, device_draft, gl)
    report["rpc"] = {
        "workers": devices.registered_servers(),
        "placement": {k: v.as_dict() for k, v in placed.items()},
    }
    return devices.placement_line(placed)


# --- rendering ------------------------------------------------------------------------------


def _bytes(n: object) -> str:
    if not isinstance(n, int):
        return "unknown"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # unreachable


def _count(n: object) -> str:
    if not isinstance(n, int):
        return "unknown"
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.2f}{suffix} ({n:,})"
    return str(n)


def _opt(value: object) -> str:
    return "-" if value is None else str(value)


def _special(add: object, tid: object) -> str:
    return f"{_opt(tid)} ({'added' if add else 'not added'})"


def _model_rows(m: dict) -> list[tuple[str, str]]:
    v = m["vocab"]
    return [
        ("file", str(m["path"])),
        ("name", _opt(m["name"])),
        ("architecture", str(m["architecture"])),
        ("size label", _opt(m["size_label"])),
        ("parameters", _count(m["n_params"])),
        ("quantization", str(m["quantization"])),
        ("file type", _opt(m["file_type"])),
        ("file size", _bytes(m["file_size"])),
        ("context length", _opt(m["context_length"])),
        ("layers", _opt(m["block_count"])),
        (
            "embedding / heads / kv heads",
            f"{_opt(m['embedding_length'])} / {_opt(m['head_count'])} / {_opt(m['head_count_kv'])}",
        ),
        ("vocab", f"{v['type']} ({v['model']}, pre {_opt(v['pre'])}), {v['n_vocab']} tokens"),
        ("BOS", _special(v["add_bos"], v["bos_id"])),
        ("EOS", _special(v["add_eos"], v["eos_id"])),
        ("EOT", _opt(v["eot_id"])),
        ("chat template", _template_row(m)),
        ("memory", f"{m['kv_rollback']['kind']}, rollback {m['kv_rollback']['rollback']}"),
        ("MTP layers", _mtp_row(m["mtp"])),
    ]


def _mtp_row(mtp: dict | None) -> str:
    if mtp is None:
        return "none"
    if mtp["problem"] is None:
        return f"{mtp['summary']}: --spec-type draft-mtp can draft with them"
    return f"{mtp['summary']}: draft-mtp cannot use them ({mtp['problem'].split(': ', 1)[-1]})"


def _template_row(m: dict) -> str:
    if not m["chat_template"]:
        return "no"
    r = m.get("chat_template_render")
    if r is None:  # the draft: its template is never used
        return "yes"
    return f"yes, renders ({r['chars']} characters)" if r["ok"] else "yes, FAILS (see below)"


def render_report(report: dict, console: Console) -> None:
    """The human form of `check_report`'s dict."""
    target, draft = report["target"], report["draft"]
    table = Table(title="model" if draft is None else "models", show_header=draft is not None)
    table.add_column("")
    table.add_column("target", overflow="fold")  # fold, not "…": paths must stay whole
    if draft is not None:
        table.add_column("draft", overflow="fold")
    t_rows = _model_rows(target)
    d_rows = _model_rows(draft) if draft is not None else None
    for i, (label, value) in enumerate(t_rows):
        table.add_row(label, value, *([d_rows[i][1]] if d_rows else []))
    console.print(table)
    if report.get("draft_kind") not in (None, "draft model"):
        console.print(f"draft: {report['draft_kind']}", markup=False, highlight=False)

    compat = report["compatibility"]
    if compat is not None:
        if compat["ok"]:
            console.print("[bold green]compatible[/]: the draft can speculate for the target")
        else:
            console.print(
                "[bold yellow]not compatible[/] under llama.cpp's rule: mode cross-vocabulary "
                "(draft-simple drafts through text; --spec-vocab-strict refuses the pair); "
                f"vocab overlap {100 * report['vocab_overlap']:.1f}% of the draft's tokens "
                "are one target token"
            )
            for reason in compat["reasons"]:
                console.print(f"  - {reason}", markup=False, highlight=False)
            if compat["first_diffs"]:
                diffs = Table(title="first differing tokens")
                for col in ("id", "target", "draft"):
                    diffs.add_column(col)
                for d in compat["first_diffs"]:
                    diffs.add_row(str(d["id"]), repr(d["target"]), repr(d["draft"]))
                console.print(diffs)

    r = target.get("chat_template_render")
    if r is not None and not r["ok"]:
        console.print("[bold red]chat template fails[/]: `run --chat` would stop with:")
        console.print(f"  {r['error']}", markup=False, highlight=False)
    off = report.get("offload")
    if off is not None:
        if off["note"]:
            console.print(f"offload: {off['note']}", markup=False, highlight=False)
        else:
            parts = [f"{role}: {off[role]}" for role in ("target", "draft") if off[role]]
            console.print("offload: " + ", ".join(parts), markup=False, highlight=False)

    mem = report["memory"]
    mtable = Table(title=f"memory at -c {mem['n_ctx']} (weights + f16 KV cache)")
    for col in ("", "weights", "KV cache", "total"):
        mtable.add_column(col)
    for role in ("target", "draft"):
        m = mem[role]
        if m is not None:
            mtable.add_row(
                role, _bytes(m["weights_bytes"]), _bytes(m["kv_bytes"]), _bytes(m["total_bytes"])
            )
    if mem["draft"] is not None:
        mtable.add_row("both", "", "", _bytes(mem["total_bytes"]))
    console.print(mtable)


def check(
    model: str | None = typer.Option(
        None, "-m", "--model", help="target model (GGUF file); default: the pulled pair"
    ),
    model_draft: str | None = typer.Option(
        None, "-md", "--model-draft", "--spec-draft-model", help="draft model (GGUF file)"
    ),
    ctx_size: int | None = typer.Option(
        None,
        "-c",
        "--ctx-size",
        show_default=False,
        help="context size for the memory estimate and the template check; default as `run`: "
        "4096, capped at the model's training context (0 = the model's)",
    ),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object instead"),
    strict: bool = typer.Option(
        False,
        "--spec-vocab-strict",
        help="exit 4 when the vocabularies differ (llama.cpp's rule), as `run` then refuses",
    ),
    n_gpu_layers: str = typer.Option(
        "auto", "-ngl", "--n-gpu-layers", "--gpu-layers", envvar="LLAMA_ARG_N_GPU_LAYERS",
        help="report where the target's layers would go with this -ngl (N, auto or all)",
    ),
    n_gpu_layers_draft: str = typer.Option(
        "auto", "-ngld", "--spec-draft-ngl", "--gpu-layers-draft", "--n-gpu-layers-draft",
        envvar="LLAMA_ARG_N_GPU_LAYERS_DRAFT",
        help="report where the draft's layers would go with this -ngld",
    ),
    rpc: str | None = typer.Option(
        None,
        "--rpc",
        envvar="LLAMA_ARG_RPC",
        help="ggml RPC workers HOST:PORT,...: probe them and say where the layers would go",
    ),
    device: str | None = typer.Option(
        None, "-dev", "--device", envvar="LLAMA_ARG_DEVICE", help="target devices (as run)"
    ),
    device_draft: str | None = typer.Option(
        None, "-devd", "--spec-draft-device", "--device-draft", help="draft devices (as run)"
    ),
) -> None:
    """Inspect a GGUF model, or check that a draft model can speculate for a target.

    Reads only the file headers (and, for -ngl/-ngld, which devices this build sees: where
    each model's layers would go), and renders the target's chat template for a one-message
    conversation within run's bounds. Reports the mode (same- or cross-vocabulary) and the
    measured vocabulary overlap. Exits 0 when all is well, 4 with --spec-vocab-strict when
    llama.cpp would refuse the pair, 5 when the chat template cannot render (it does not
    compile, raises, or passes run's time, size or depth limits).
    """
    try:
        if model is None:  # like `run`: the pulled default pair, both models
            from specgguf.modelfiles.models import require_default_pair

            target, default_draft = require_default_pair()
            model, model_draft = str(target), model_draft or str(default_draft)
        report = check_report(model, model_draft, ctx_size)
        report["offload"] = offload_report(report, n_gpu_layers, n_gpu_layers_draft)
        rpc_line = None
        if rpc or device or device_draft:
            rpc_line = _rpc_placement(
                report, rpc, device, device_draft, n_gpu_layers, n_gpu_layers_draft
            )
    except SpecggufError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(int(err.code)) from None
    if json_out:
        typer.echo(json.dumps(report, ensure_ascii=False))
    else:
        render_report(report, Console(highlight=False))
        if rpc_line:
            typer.echo(rpc_line)
    if strict and report["compatible"] is False:
        raise typer.Exit(int(ExitCode.INCOMPATIBLE))
    rendered = report["target"]["chat_template_render"]
    if rendered is not None and not rendered["ok"]:
        raise typer.Exit(int(ExitCode.PROMPT))
