"""`specgguf check`: inspect a model, or a target/draft pair, without loading either.

Loading a 1.5B target only to learn that its draft has another vocabulary wastes a minute
and a gigabyte; everything this command says comes from the GGUF headers (gguf_info), the
compatibility verdict is llama.cpp's own rule (compat), and memory is the estimate of
weights plus an f16 KV cache at -c. The lead registers `check` on the Typer app; the body
lives in `check_report` so a default model pair can be filled in before it is called.
"""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from specgguf.compat import check_compatible
from specgguf.errors import ExitCode, SpecggufError, UsageError
from specgguf.gguf_info import GGUFInfo, MemoryEstimate, estimate_memory, read_gguf_info
from specgguf.vocab_overlap import vocab_overlap

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
    }


def _mode(compatible: bool) -> str:
    return "same-vocabulary" if compatible else "cross-vocabulary"


def check_report(target_path: str, draft_path: str | None, n_ctx: int) -> dict[str, object]:
    """Everything `check` prints, as plain data (the --json object).

    With a draft, `mode` says how `run` will use it: "same-vocabulary" (llama.cpp's rule holds)
    or "cross-vocabulary" (it drafts through text); `vocab_overlap` is the share of the draft's
    tokens whose text is exactly one target token.

    n_ctx 0 means the target's training context, as llama.cpp's `-c 0` does; the draft gets
    the same context as the target (llama.cpp has no separate draft context size any more).
    """
    if n_ctx < 0:
        raise UsageError(f"--ctx-size must be 0 (the model's own) or positive, not {n_ctx}")
    target = read_gguf_info(target_path)
    draft = read_gguf_info(draft_path) if draft_path is not None else None
    if n_ctx == 0:
        n_ctx = target.context_length or 0
    t_mem = estimate_memory(target, n_ctx)
    report: dict[str, object] = {
        "n_ctx": n_ctx,
        "target": _model_dict(target, t_mem),
        "draft": None,
        "compatible": None,
        "compatibility": None,
        "mode": None,
        "vocab_overlap": None,
        "memory": {
            "n_ctx": n_ctx,
            "target": _memory_dict(t_mem),
            "draft": None,
            "total_bytes": t_mem.total_bytes,
        },
    }
    if draft is not None:
        d_mem = estimate_memory(draft, n_ctx)
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
        ("chat template", "yes" if m["chat_template"] else "no"),
    ]


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
    ctx_size: int = typer.Option(
        4096, "-c", "--ctx-size", help="context size for the memory estimate (0 = the model's)"
    ),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object instead"),
    strict: bool = typer.Option(
        False,
        "--spec-vocab-strict",
        help="exit 4 when the vocabularies differ (llama.cpp's rule), as `run` then refuses",
    ),
) -> None:
    """Inspect a GGUF model, or check that a draft model can speculate for a target.

    Reads only the file headers. Reports the mode (same- or cross-vocabulary) and the measured
    vocabulary overlap; exits 0, or 4 with --spec-vocab-strict when llama.cpp would refuse the
    pair.
    """
    try:
        if model is None:  # like `run`: the pulled default pair, both models
            from specgguf.models import require_default_pair

            target, default_draft = require_default_pair()
            model, model_draft = str(target), model_draft or str(default_draft)
        report = check_report(model, model_draft, ctx_size)
    except SpecggufError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(int(err.code)) from None
    if json_out:
        typer.echo(json.dumps(report, ensure_ascii=False))
    else:
        render_report(report, Console(highlight=False))
    if strict and report["compatible"] is False:
        raise typer.Exit(int(ExitCode.INCOMPATIBLE))
