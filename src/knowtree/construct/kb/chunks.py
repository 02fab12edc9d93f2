"""Step 1 of the seed's Algorithm 1: domain knowledge chunked and contextualized, then indexed.

Every section (a record, or a section of a document) is cut with knowtree's chunker, and every chunk
gets a context: the document and its section path, plus the context of the chunk before it in the
same section (the seed feeds the previous contextualized chunk forward). `context="path"` (the
default) builds that context without a model: at 16k MedQuAD records a model call per chunk would
cost hours on a CPU. `context="model"` asks the model for a one-sentence context per chunk, given the
previous chunk's context (Prompt G.5's job; one cached call per chunk). The chunk text plus its
context is what the hybrid index (BM25 + dense) sees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from pydantic import BaseModel

from knowtree.construct.calls import Calls, Here, in_order
from knowtree.ingest.chunk import chunk_document
from knowtree.ingest.kb_inputs import DocSection
from knowtree.ingest.structure import make_document
from knowtree.llm.client import LLMClient
from knowtree.prompts.reply import ask, string
from knowtree.records import KBChunk
from knowtree.retrieve import Passage
from knowtree.text import clip

CHUNK_CHARS = 1500
CONTEXT_CHARS = 300


class ChunkContext(BaseModel):
    # ≤ CONTEXT_CHARS asked for (schema only: the embedded engine's grammar does not always enforce
    # it); a longer sentence is cut below, not refused
    context: str = string(CONTEXT_CHARS, ..., description="one sentence situating the chunk in its document")


def chunk_sections(sections: Sequence[DocSection], *, size: int = CHUNK_CHARS) -> list[KBChunk]:
    """Chunks of every section, with the path context (no model)."""
    out: list[KBChunk] = []
    for sec in sections:
        where = " > ".join(sec.path or [sec.title]) if (sec.path or sec.title) else sec.id
        doc = make_document(sec.source, sec.text)
        if not doc.text.strip():
            continue
        pieces = chunk_document(doc, size=size) if len(doc.text) > size else None
        texts = [c.text for c in pieces] if pieces else [doc.text.strip()]
        previous = ""
        for i, text in enumerate(texts):
            context = f"{where}" + (f" (part {i + 1} of {len(texts)}; before: {previous})" if i else "")
            out.append(
                KBChunk(
                    id=f"{sec.id}#{i + 1}" if len(texts) > 1 else sec.id,
                    doc_id=sec.id,
                    source=sec.source,
                    path=sec.path or [sec.title],
                    text=text,
                    context=context,
                )
            )
            previous = text[:120].replace("\n", " ")
    return out


def contextualize_with_model(
    chunks: list[KBChunk],
    client: LLMClient,
    domain: str,
    *,
    progress: Callable[[int, int], None] | None = None,
    calls: Calls | None = None,
) -> None:
    """Replace each chunk's context by the model's sentence (the previous chunk's context fed forward).
    A document's chunks are one piece of work (each call waits for the one before); documents are
    independent, so `calls` (default: one after another through `client`) may run them anywhere."""
    runs: list[list[KBChunk]] = []
    for chunk in chunks:  # a document's consecutive chunks
        if not runs or runs[-1][0].doc_id != chunk.doc_id:
            runs.append([])
        runs[-1].append(chunk)
    items = [[(chunk.path, chunk.text) for chunk in run] for run in runs]
    said = (calls or Here(client)).map(partial(context_sentences, domain), items)
    for run, sentences in zip(runs, in_order(said, [len(r) for r in runs], progress), strict=True):
        for chunk, sentence in zip(run, sentences, strict=True):
            chunk.context = f"{' > '.join(chunk.path)}: {sentence}"


def context_sentences(domain: str, client: LLMClient, chunks: list[tuple[list[str], str]]) -> list[str]:
    """The model's context sentence of each of one document's chunks ((path, text) each), in order,
    each asked with the sentence before it."""
    out: list[str] = []
    for path, text in chunks:
        reply = ask(
            client,
            ChunkContext,
            "kb_context",
            domain=domain or "general",
            path=" > ".join(path),
            previous=out[-1] if out else "(start of the document)",
            chunk=text[:3000],
            purpose="kb_context",
            max_tokens=120,
        ).value
        out.append(clip(reply.context, CONTEXT_CHARS))
    return out


def chunk_passages(chunks: Sequence[KBChunk]) -> list[Passage]:
    return [Passage(id=c.id, text=c.indexed_text, doc=c.doc_id) for c in chunks]
