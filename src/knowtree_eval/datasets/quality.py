"""QuALITY multiple choice, in L-Eval's line format."""

from __future__ import annotations

import re
from pathlib import Path

from knowtree.errors import InputError
from knowtree.retrieve.choices import split_choices
from knowtree_eval.datasets.base import DEFAULT_CHUNK_CHARS, Case, Corpus, Dataset
from knowtree_eval.datasets.read import chunk_passages, jsonl_objects, limit_cases, need, prune

_OPTION = re.compile(r"(?:^|\n)[ \t]*\(([A-D])\)[ \t]*")
_GOLD = re.compile(r"^\s*\(?([A-D])\)")
# questions L-Eval added to QuALITY (counting and "longest ..." questions): not reading comprehension
_LEVAL_EXTRA = re.compile(
    r"\bhow many (?:words|sentences|nouns)\b|\blongest (?:sentence|dialogue)\b|\bnumber of (?:words|sentences)\b",
    re.IGNORECASE,
)


def parse_options(text: str) -> tuple[str, list[str]] | None:
    """Split "question\\n(A) x\\n(B) y…" into the question and its option texts (None if not A–D in
    order): the product's split (`knowtree.retrieve.choices`) with the loader's own strict reading of a
    letter, so a dataset's parse does not move with the product's."""
    return split_choices(text, _OPTION)


def load_quality(
    path: str | Path,
    *,
    limit: int | None = None,
    chunk_chars: int = DEFAULT_CHUNK_CHARS,
    keep_leval_extras: bool = False,
) -> Dataset:
    """QuALITY multiple choice in L-Eval's format: `{input: article, instructions: [...], outputs: [...]}`.

    Each line's article is one corpus (`articleN`, N = line number), cut into passages of about
    `chunk_chars`. The counting/"longest sentence" questions L-Eval added are dropped unless
    `keep_leval_extras`, since they test counting rather than reading.
    """
    p = Path(path)
    cases: list[Case] = []
    corpora: dict[str, Corpus] = {}
    extras = 0
    for n, obj in jsonl_objects(p):
        where = f"line {n}"
        article = need(obj, "input", p, where)
        questions = need(obj, "instructions", p, where, list)
        outputs = need(obj, "outputs", p, where, list)
        if len(questions) != len(outputs):
            raise InputError(str(p), f"{where}: {len(questions)} instructions but {len(outputs)} outputs")
        cid = f"article{n}"
        corpus = Corpus(cid)
        for passage in chunk_passages(cid, article, chunk_chars):
            corpus.add(passage)
        used = False
        for j, (q, out) in enumerate(zip(questions, outputs, strict=True)):
            qwhere = f"{where}, question {j + 1}"
            if not isinstance(q, str) or not isinstance(out, str):
                raise InputError(str(p), f"{qwhere}: instruction and output must be strings")
            if not keep_leval_extras and _LEVAL_EXTRA.search(q):
                extras += 1
                continue
            parsed = parse_options(q)
            if parsed is None:
                raise InputError(str(p), f"{qwhere}: no options (A)…(D) found in {q[:60]!r}")
            stem, options = parsed
            gold = _GOLD.match(out)
            if gold is None or ord(gold.group(1)) - 65 >= len(options):
                raise InputError(
                    str(p), f"{qwhere}: output {out[:40]!r} does not start with a valid (letter)"
                )
            letter = gold.group(1)
            cases.append(
                Case(
                    id=f"{cid}/q{j + 1}",
                    question=stem,
                    corpus=cid,
                    answer=options[ord(letter) - 65],
                    options=options,
                    gold_letter=letter,
                )
            )
            used = True
        if used:
            corpora[cid] = corpus
    ds = Dataset("quality", str(p), limit_cases(cases, limit), corpora)
    if extras:
        ds.notes.append(f"dropped {extras} question(s) L-Eval added (counting / longest sentence)")
    return prune(ds)
