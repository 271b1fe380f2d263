"""--rerank: how a query and a document become one input of the reranker, as llama-server
lays them out.

A model that carries a chat template named "rerank" (a converted Qwen3 reranker does) is given
that template with {query} and then {document} replaced, tokenized with its special tokens
read as such and nothing added. Any other model (the BERT-like cross-encoders) gets the
pair the way its tokenizer joins two sentences: BOS if it adds one, the query, EOS (SEP where
it has no EOS) if it adds one, SEP if it adds one, the document, EOS again; the texts
themselves tokenized plainly.

Whether a model can rerank at all is its header's business: llama.cpp scores a pair through a
classifier head (`cls` and/or `cls.output` tensors); without one, rank pooling hands back a
hidden-state value that means nothing, so serve refuses such a model at start."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

#: the tensors of a classifier head, one of which every reranker llama.cpp runs carries
CLASSIFIER_TENSORS = ("cls.weight", "cls.output.weight")
#: llama.h's LLAMA_TOKEN_NULL
TOKEN_NULL = -1

#: text -> token ids, (text, parse_special) as llama_tokenize takes them, nothing added
Tokenize = Callable[[str, bool], list[int]]


def has_classifier(tensor_names: Iterable[str]) -> bool:
    """Whether a model's tensors include a classifier head (what reranking reads)."""
    names = set(tensor_names)
    return any(t in names for t in CLASSIFIER_TENSORS)


@dataclass(frozen=True)
class RerankFormat:
    """One model's layout of a (query, document) pair."""

    template: str | None  # the model's "rerank" chat template, else None
    bos: int
    eos: int  # EOS, or SEP where the vocabulary has no EOS
    sep: int
    add_bos: bool
    add_eos: bool
    add_sep: bool

    def tokens(self, query: str, document: str, tokenize: Tokenize) -> list[int]:
        """The pair's input tokens."""
        if self.template is not None:
            prompt = self.template.replace("{query}", query).replace("{document}", document)
            return tokenize(prompt, True)
        out = [self.bos] if self.add_bos else []
        out += tokenize(query, False)
        out += [self.eos] if self.add_eos else []
        out += [self.sep] if self.add_sep else []
        out += tokenize(document, False)
        out += [self.eos] if self.add_eos else []
        return out


def rerank_format(model) -> RerankFormat:  # noqa: ANN001 - engine.Model
    """`model`'s pair layout, read from llama.cpp's view of its vocabulary and templates."""
    from specgguf.binding import engine

    ll = engine.ll
    raw = ll.llama_model_chat_template(model.ptr, b"rerank")
    vocab = model.vocab
    sep = int(ll.llama_vocab_sep(vocab))
    eos = int(ll.llama_vocab_eos(vocab))
    return RerankFormat(
        template=raw.decode("utf-8", "replace") if raw else None,
        bos=int(ll.llama_vocab_bos(vocab)),
        eos=sep if eos == TOKEN_NULL else eos,
        sep=sep,
        add_bos=bool(ll.llama_vocab_get_add_bos(vocab)),
        add_eos=bool(ll.llama_vocab_get_add_eos(vocab)),
        add_sep=bool(ll.llama_vocab_get_add_sep(vocab)),
    )

