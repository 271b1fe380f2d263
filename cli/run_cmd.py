"""`specgguf run`: generate from one prompt, streaming text to stdout and statistics to stderr."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from specgguf_cli import options as o


@o.with_ngram_options
def run(
    model: Path | None = o.Model,
    model_draft: Path | None = o.ModelDraft,
    spec_type: str | None = o.SpecType,
    spec_draft_n_max: str = o.NMax,
    spec_draft_n_min: int = o.NMin,
    spec_draft_p_min: float = o.PMin,
    spec_draft_p_split: float = o.PSplit,
    spec_draft_sampling: str = o.DraftSampling,
    n_gpu_layers: str = o.NGL,
    n_gpu_layers_draft: str = o.NGLD,
    ctx_size: int = o.Ctx,
    batch_size: int = o.Batch,
    flash_attn: str = o.FlashAttn,
    threads: int = o.Threads,
    threads_draft: int = o.ThreadsDraft,
    no_repack: bool = o.NoRepack,
    n_predict: int = o.NPredict,
    prompt: str | None = o.Prompt,
    file: Path | None = o.File,
    seed: int = o.Seed,
    temp: float = o.Temp,
    top_k: int = o.TopK,
    top_p: float = o.TopP,
    min_p: float = o.MinP,
    ignore_eos: bool = o.IgnoreEos,
    json_out: bool = o.Json,
    verbose: bool = o.Verbose,
    quiet: bool = o.Quiet,
    ngram=None,
) -> int:
    """Generate text with speculative decoding (or plain decoding with --spec-type none).

    With no -m, uses the pulled default pair (Qwen2.5-Coder 1.5B target, 0.5B draft) and
    draft-simple. A draft model given with -md and no --spec-type selects draft-simple.
    """
    from specgguf.errors import ExitCode
    from specgguf.sampling import SamplerParams
    from specgguf.spec_types import parse_spec_types

    # Everything that can be checked without a model is checked first: a typo costs nothing.
    o.validate(
        n_predict=n_predict,
        n_min=spec_draft_n_min,
        p_min=spec_draft_p_min,
        p_split=spec_draft_p_split,
        temp=temp,
        top_p=top_p,
        min_p=min_p,
        ctx=ctx_size,
        threads=threads,
        threads_draft=threads_draft,
        flash_attn=flash_attn,
        draft_sampling=spec_draft_sampling,
        batch=batch_size,
    )
    n_max = o.parse_n_max(spec_draft_n_max)
    if model is None:
        from specgguf.models import require_default_pair

        model, default_draft = require_default_pair()
        model_draft = model_draft or default_draft
    types = parse_spec_types(spec_type, have_draft_model=model_draft is not None)
    text = o.read_prompt(prompt, file)

    from specgguf.session import LoadOptions, Session, SpecOptions, resolve_seed

    session = Session(
        LoadOptions(
            model=model,
            model_draft=model_draft,
            n_gpu_layers=n_gpu_layers,
            n_gpu_layers_draft=n_gpu_layers_draft,
            n_ctx=ctx_size,
            n_batch=batch_size,
            threads=threads,
            threads_draft=threads_draft,
            flash_attn=flash_attn,
            repack=not no_repack,
            verbose=verbose,
        ),
        SpecOptions(
            types=types,
            n_max=n_max if n_max is not None else 3,
            n_min=spec_draft_n_min,
            p_min=spec_draft_p_min,
            draft_sampling=spec_draft_sampling,
        ),
    )
    try:
        tokens = session.tokenize(text)
        used_seed = resolve_seed(seed)
        sampler = SamplerParams(temp=temp, top_k=top_k, top_p=top_p, min_p=min_p)
        decoder = session.decoder(sampler, n_predict, used_seed, ignore_eos=ignore_eos)
        result = stream_generation(session, decoder, tokens, json_out=json_out)
        stats = decoder.stats
        if not json_out and result.text and not result.text.endswith("\n"):
            sys.stdout.write("\n")  # the text ends before the report starts on a terminal
            sys.stdout.flush()
        if not quiet:
            for line in stats.report_lines():
                print(line, file=sys.stderr)
        if json_out:
            obj = {
                "text": result.text,
                "stop_reason": result.stop_reason,
                "tokens_predicted": stats.predicted_n,
                "tokens_evaluated": stats.prompt_n,
                "model": str(model),
                "draft_model": str(model_draft) if "draft-simple" in types else None,
                "spec_type": types or ["none"],
                "seed": used_seed,
                "timings": stats.timings(),
            }
            sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
            sys.stdout.flush()
        return int(ExitCode.INTERRUPTED) if result.stop_reason == "interrupted" else 0
    finally:
        session.close()


class GenerationResult:
    def __init__(self, text: str, stop_reason: str) -> None:
        self.text = text
        self.stop_reason = stop_reason


def stream_generation(session, decoder, tokens, *, json_out: bool, color: bool = False):
    """Run the decoder, writing each round's text as soon as it is accepted.

    Ctrl-C stops generation, keeps what was already written, and reports "interrupted".
    """
    from specgguf.output import TextStream

    stream = TextStream(None if json_out else sys.stdout, color=color)
    piece = session.target_model.piece
    stop_reason = ""
    try:
        for rnd in decoder.generate(tokens):
            stream.write([piece(t) for t in rnd.emitted], drafted=rnd.n_accepted)
        stop_reason = decoder.stop_reason
    except KeyboardInterrupt:
        stop_reason = "interrupted"
    finally:
        stream.finish()
    return GenerationResult(stream.text, stop_reason)
