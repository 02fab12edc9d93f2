"""Benchmark loaders: every dataset becomes the same two things, questions (`Case`) and the text they
are asked over (`Corpus`), so every method and metric works on every dataset unchanged.

Passage ids are chosen so gold evidence can be compared with what a method retrieved:

| kind         | corpus                          | passage id            | evidence            |
|--------------|---------------------------------|-----------------------|---------------------|
| quality      | one article                     | `articleN#i` (chunks) | none                |
| hotpotqa     | every paragraph, pooled in one  | paragraph title       | the two gold titles |
| locomo       | one conversation                | dia_id (`D3:7`)       | dia_ids             |
| financebench | one filing (or all, `pooled`)   | `DOC#page` (0-based)  | `DOC#page`          |
| jsonl        | the line's documents            | doc id, or `doc#i`    | doc or passage ids  |

Malformed input raises `InputError` naming the file and the record, never a KeyError deep inside.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from knowtree.errors import InputError, UserError
from knowtree.retrieve.bm25 import Passage, fingerprint

KINDS = ("quality", "locomo", "financebench", "hotpotqa", "jsonl")
DEFAULT_CHUNK_CHARS = 1200  # passages cut from long documents: ~300 tokens, a common retrieval unit


@dataclass(slots=True)
class Case:
    """One question, with whatever gold the dataset has.

    `question` is the question alone; for multiple choice the options are in `options` (texts, in
    letter order) and `gold_letter` is the correct one ("A"…); `prompt()` renders both together.
    `evidence` holds passage or document ids of `corpus` that contain the answer.
    """

    id: str
    question: str
    corpus: str
    answer: str | None = None
    options: list[str] | None = None
    gold_letter: str | None = None
    evidence: list[str] = field(default_factory=list)
    category: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def prompt(self) -> str:
        """The question as a model should see it: with lettered options when it has them."""
        if not self.options:
            return self.question
        lines = [f"({chr(65 + i)}) {o}" for i, o in enumerate(self.options)]
        return self.question.rstrip() + "\n\n" + "\n".join(lines)


@dataclass
class Corpus:
    """The passages questions are asked over, grouped into documents (in reading order)."""

    id: str
    passages: dict[str, Passage] = field(default_factory=dict)
    documents: dict[str, list[str]] = field(default_factory=dict)  # doc id → passage ids, in order
    _fp: str | None = field(default=None, repr=False)

    def add(self, passage: Passage) -> None:
        if passage.id in self.passages:
            return  # the first occurrence wins: pooled datasets repeat paragraphs
        doc = passage.doc or passage.id
        passage.doc = doc
        self.passages[passage.id] = passage
        self.documents.setdefault(doc, []).append(passage.id)
        self._fp = None

    def __len__(self) -> int:
        return len(self.passages)

    def text(self, pid: str) -> str:
        return self.passages[pid].text

    def document_text(self, doc: str, sep: str = "\n\n") -> str:
        """A whole document, rebuilt from its passages (what tree-building methods ingest)."""
        return sep.join(self.passages[p].text for p in self.documents[doc])

    def knows(self, evidence_id: str) -> bool:
        return evidence_id in self.passages or evidence_id in self.documents

    def fingerprint(self) -> str:
        if self._fp is None:
            self._fp = fingerprint(self.passages.values())
        return self._fp


@dataclass
class Dataset:
    kind: str
    path: str
    cases: list[Case]
    corpora: dict[str, Corpus]
    notes: list[str] = field(default_factory=list)  # what the loader dropped or repaired, and why

    def corpus(self, case: Case) -> Corpus:
        return self.corpora[case.corpus]

    @property
    def passages(self) -> int:
        return sum(len(c) for c in self.corpora.values())


# -- helpers -----------------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        with _open_text(path) as f:
            return json.load(f)
    except OSError as exc:
        raise InputError(str(path), f"cannot read ({exc.strerror or exc})") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(str(path), f"not valid JSON ({exc})") from exc


def _open_text(path: Path) -> Any:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; a bad line names its number."""
    try:
        with _open_text(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(str(path), f"line {n}: not valid JSON ({exc})") from exc
                if not isinstance(obj, dict):
                    raise InputError(str(path), f"line {n}: expected a JSON object, got {type(obj).__name__}")
                yield n, obj
    except OSError as exc:
        raise InputError(str(path), f"cannot read ({exc.strerror or exc})") from exc
    except (UnicodeDecodeError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError(str(path), f"cannot decode ({exc})") from exc


def _need(obj: dict[str, Any], key: str, path: Path, where: str, kind: type | tuple[type, ...] = str) -> Any:
    if key not in obj or obj[key] is None:
        raise InputError(str(path), f"{where}: missing {key!r}")
    value = obj[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise InputError(str(path), f"{where}: {key!r} should be {names}, got {type(value).__name__}")
    return value


def _chunks(doc: str, text: str, size: int) -> list[Passage]:
    """Cut a long document into passages with knowtree's own chunker (paragraph/sentence boundaries)."""
    if len(text) <= size:
        return [Passage(id=doc, text=text, doc=doc)]
    from knowtree.ingest.chunk import chunk_document
    from knowtree.types import Document

    d = Document(path=doc, text=text, sha256=hashlib.sha256(text.encode("utf-8")).hexdigest())
    return [
        Passage(
            id=f"{doc}#{c.index}",
            text=c.text,
            doc=doc,
            meta={"line_start": c.span.line_start, "line_end": c.span.line_end},
        )
        for c in chunk_document(d, size=max(size, 200))
    ]


def _limit(cases: list[Case], limit: int | None) -> list[Case]:
    if limit is not None and limit < 0:
        raise UserError(f"--limit must be 0 or more, got {limit}")
    return cases if limit is None else cases[:limit]


def _keep_known_evidence(dataset: Dataset) -> None:
    """Drop gold ids that name nothing in the corpus (typos in the source data), and say so."""
    dropped: list[str] = []
    for case in dataset.cases:
        corpus = dataset.corpora[case.corpus]
        known = [e for e in case.evidence if corpus.knows(e)]
        dropped.extend(f"{case.id}:{e}" for e in case.evidence if not corpus.knows(e))
        case.evidence = known
    if dropped:
        shown = ", ".join(dropped[:5]) + (" …" if len(dropped) > 5 else "")
        dataset.notes.append(f"{len(dropped)} evidence id(s) not in the corpus were ignored ({shown})")


# -- QuALITY (L-Eval line format) --------------------------------------------------------------------

_OPTION = re.compile(r"(?:^|\n)[ \t]*\(([A-D])\)[ \t]*")
_GOLD = re.compile(r"^\s*\(?([A-D])\)")
# questions L-Eval added to QuALITY (counting and "longest ..." questions): not reading comprehension
_LEVAL_EXTRA = re.compile(
    r"\bhow many (?:words|sentences|nouns)\b|\blongest (?:sentence|dialogue)\b|\bnumber of (?:words|sentences)\b",
    re.IGNORECASE,
)


def parse_options(text: str) -> tuple[str, list[str]] | None:
    """Split "question\\n(A) x\\n(B) y…" into the question and its option texts (None if not A–D in order)."""
    marks = list(_OPTION.finditer(text))
    letters = [m.group(1) for m in marks]
    if len(letters) < 2 or letters != [chr(65 + i) for i in range(len(letters))]:
        return None
    stem = text[: marks[0].start()].strip()
    options = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        options.append(" ".join(text[m.end() : end].split()))
    return stem, options


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
    for n, obj in _jsonl(p):
        where = f"line {n}"
        article = _need(obj, "input", p, where)
        questions = _need(obj, "instructions", p, where, list)
        outputs = _need(obj, "outputs", p, where, list)
        if len(questions) != len(outputs):
            raise InputError(str(p), f"{where}: {len(questions)} instructions but {len(outputs)} outputs")
        cid = f"article{n}"
        corpus = Corpus(cid)
        for passage in _chunks(cid, article, chunk_chars):
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
    ds = Dataset("quality", str(p), _limit(cases, limit), corpora)
    if extras:
        ds.notes.append(f"dropped {extras} question(s) L-Eval added (counting / longest sentence)")
    return _prune(ds)


def _prune(ds: Dataset) -> Dataset:
    """Keep only the corpora the (limited) cases use."""
    used = {c.corpus for c in ds.cases}
    ds.corpora = {k: v for k, v in ds.corpora.items() if k in used}
    return ds


# -- HotpotQA distractor -----------------------------------------------------------------------------


def load_hotpotqa(path: str | Path, *, limit: int | None = None) -> Dataset:
    """HotpotQA distractor: every paragraph of every question pooled into ONE corpus, id = title.

    Pooling (rather than 10 paragraphs per question) makes retrieval a real search; the pool is built
    from the whole file even with `limit`, so the corpus is the same however many questions run.
    Accepts the shipped sample format (`title_a/para_a`, `title_b/para_b`, `distractors`) and the
    official one (`context: [[title, sentences]]`, `supporting_facts: [[title, i]]`).
    """
    p = Path(path)
    data = _read_json(p)
    if isinstance(data, dict):
        data = data.get("data", [data])
    if not isinstance(data, list):
        raise InputError(str(p), "expected a JSON list of questions")
    corpus = Corpus("hotpotqa")
    cases: list[Case] = []

    def para(title: Any, sentences: Any, where: str) -> None:
        if not isinstance(title, str) or not isinstance(sentences, list | str):
            raise InputError(str(p), f"{where}: a paragraph is [title, [sentences]]")
        body = sentences if isinstance(sentences, str) else "".join(str(s) for s in sentences)
        corpus.add(Passage(id=title, text=f"{title}\n{body.strip()}", doc=title))

    for i, obj in enumerate(data):
        where = f"record {i} ({obj.get('_id', '?') if isinstance(obj, dict) else '?'})"
        if not isinstance(obj, dict):
            raise InputError(str(p), f"record {i}: expected an object")
        question = _need(obj, "question", p, where)
        if "context" in obj:  # the official format
            for t in _need(obj, "context", p, where, list):
                if not isinstance(t, list) or len(t) < 2:
                    raise InputError(str(p), f"{where}: a context entry is [title, [sentences]]")
                para(t[0], t[1], where)
            facts = obj.get("supporting_facts") or []
            gold = list(dict.fromkeys(f[0] for f in facts if isinstance(f, list) and f))
        else:
            gold = [_need(obj, "title_a", p, where), _need(obj, "title_b", p, where)]
            para(gold[0], _need(obj, "para_a", p, where, (list, str)), where)
            para(gold[1], _need(obj, "para_b", p, where, (list, str)), where)
            for d in obj.get("distractors") or []:
                if not isinstance(d, list) or len(d) < 2:
                    raise InputError(str(p), f"{where}: a distractor is [title, [sentences], score]")
                para(d[0], d[1], where)
        answer = obj.get("answer")
        cases.append(
            Case(
                id=str(obj.get("_id") or obj.get("id") or f"q{i}"),
                question=question,
                corpus=corpus.id,
                answer=None if answer is None else str(answer),
                evidence=list(dict.fromkeys(gold)),
                category=obj.get("type"),
                meta={k: obj[k] for k in ("supporting_facts", "level") if k in obj},
            )
        )
    ds = Dataset("hotpotqa", str(p), _limit(cases, limit), {corpus.id: corpus})
    _keep_known_evidence(ds)
    return ds


# -- LoCoMo ------------------------------------------------------------------------------------------

LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_DIA_ID = re.compile(r"D:?(\d+):(\d+)")
_SESSION = re.compile(r"session_(\d+)")


def load_locomo(path: str | Path, *, limit: int | None = None, keep_adversarial: bool = False) -> Dataset:
    """LoCoMo: each conversation is a corpus; each dialogue turn a passage (id = dia_id, "D3:7").

    A turn's text is "[session date] Speaker: words" (plus the shared photo's caption, which questions
    ask about); the speaker, session and session date are also in `meta`. Category 5
    (adversarial, no answer) is skipped unless `keep_adversarial`. Evidence strings are normalised
    ("D8:6; D9:17" → two ids, "D:11:26" → "D11:26").
    """
    p = Path(path)
    data = _read_json(p)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise InputError(str(p), "expected a JSON list of conversations")
    cases: list[Case] = []
    corpora: dict[str, Corpus] = {}
    skipped = 0
    for i, sample in enumerate(data):
        if not isinstance(sample, dict):
            raise InputError(str(p), f"conversation {i}: expected an object")
        sid = str(sample.get("sample_id") or f"conv{i}")
        where = f"conversation {sid}"
        conv = _need(sample, "conversation", p, where, dict)
        corpus = Corpus(sid)
        sessions = sorted(
            (int(m.group(1)), v)
            for k, v in conv.items()
            if (m := _SESSION.fullmatch(k)) and isinstance(v, list)
        )
        for num, turns in sessions:
            date = conv.get(f"session_{num}_date_time")
            for t, turn in enumerate(turns):
                if not isinstance(turn, dict):
                    raise InputError(str(p), f"{where}, session {num}, turn {t}: expected an object")
                tw = f"{where}, session {num}, turn {t}"
                dia = _need(turn, "dia_id", p, tw)
                speaker = str(turn.get("speaker") or "")
                # the session date goes with every turn: a turn read alone (top-k retrieval) must still
                # say when it was said, or no method can answer the temporal questions
                text = (f"[{date}] " if date else "") + f"{speaker}: {turn.get('text') or ''}"
                if turn.get("blip_caption"):
                    text += f" [shares {turn['blip_caption']}]"
                corpus.add(
                    Passage(
                        id=dia,
                        text=text,
                        doc=f"session_{num}",
                        meta={"speaker": speaker, "session": num, "date": date},
                    )
                )
        corpora[sid] = corpus
        for j, qa in enumerate(_need(sample, "qa", p, where, list)):
            qw = f"{where}, qa {j}"
            if not isinstance(qa, dict):
                raise InputError(str(p), f"{qw}: expected an object")
            category = qa.get("category")
            if category == 5 and not keep_adversarial:
                skipped += 1
                continue
            evidence: list[str] = []
            for e in qa.get("evidence") or []:
                evidence.extend(f"D{a}:{b}" for a, b in _DIA_ID.findall(str(e)))
            answer = qa.get("answer", qa.get("adversarial_answer"))
            cases.append(
                Case(
                    id=f"{sid}/q{j}",
                    question=_need(qa, "question", p, qw),
                    corpus=sid,
                    answer=None if answer is None else str(answer),
                    evidence=list(dict.fromkeys(evidence)),
                    category=LOCOMO_CATEGORIES.get(category, None if category is None else str(category)),
                )
            )
    ds = Dataset("locomo", str(p), _limit(cases, limit), corpora)
    if skipped:
        ds.notes.append(f"skipped {skipped} adversarial (category 5) question(s) without an answer")
    _keep_known_evidence(ds)
    return _prune(ds)


# -- FinanceBench ------------------------------------------------------------------------------------


def default_pages_path(questions_path: str | Path) -> Path:
    """The pages file next to a questions file: `X_questions.jsonl` → `X_pages.jsonl.gz` (or .jsonl)."""
    q = Path(questions_path)
    stem = q.name.split(".")[0]
    base = stem[: -len("_questions")] if stem.endswith("_questions") else stem
    for name in (f"{base}_pages.jsonl.gz", f"{base}_pages.jsonl", "financebench_dev_pages.jsonl.gz"):
        if (q.parent / name).exists():
            return q.parent / name
    return q.parent / f"{base}_pages.jsonl.gz"


def load_financebench(
    questions_path: str | Path,
    pages_path: str | Path | None = None,
    *,
    limit: int | None = None,
    pooled: bool = False,
) -> Dataset:
    """FinanceBench: free-form questions over SEC filings; each page is a passage `DOC#page` (0-based).

    By default each filing is its own corpus (the question names its filing, as when a tree is built
    per document); `pooled=True` puts every filing in one corpus (the harder "shared store" setting).
    Only the filings the (limited) questions need are read from the pages file.
    """
    qp = Path(questions_path)
    pp = Path(pages_path) if pages_path else default_pages_path(qp)
    cases: list[Case] = []
    for n, obj in _jsonl(qp):
        where = f"line {n}"
        doc = _need(obj, "doc_name", qp, where)
        evidence = []
        for e in obj.get("evidence") or []:
            if not isinstance(e, dict) or "evidence_page_num" not in e:
                raise InputError(str(qp), f"{where}: evidence entries need doc_name and evidence_page_num")
            evidence.append(f"{e.get('doc_name') or doc}#{int(e['evidence_page_num'])}")
        cases.append(
            Case(
                id=str(obj.get("financebench_id") or f"line{n}"),
                question=_need(obj, "question", qp, where),
                corpus="financebench" if pooled else doc,
                answer=None if obj.get("answer") is None else str(obj["answer"]),
                evidence=list(dict.fromkeys(evidence)),
                category=obj.get("question_type"),
                meta={"doc_name": doc, "company": obj.get("company")},
            )
        )
    cases = _limit(cases, limit)
    needed = {c.meta["doc_name"] for c in cases}
    if pooled:  # evidence in another filing can only be found when that filing is searched too
        needed |= {e.rsplit("#", 1)[0] for c in cases for e in c.evidence}
    if not pp.exists():
        raise InputError(str(pp), "FinanceBench pages file not found (give it with --pages)")
    corpora: dict[str, Corpus] = {}
    for n, obj in _jsonl(pp):
        doc = _need(obj, "doc_name", pp, f"line {n}")
        if doc not in needed:
            continue
        pages = _need(obj, "pages", pp, f"line {n} ({doc})", list)
        corpus = corpora.setdefault(
            "financebench" if pooled else doc, Corpus("financebench" if pooled else doc)
        )
        for i, page in enumerate(pages):
            corpus.add(Passage(id=f"{doc}#{i}", text=str(page), doc=doc, meta={"page": i}))
    missing = sorted({c.corpus for c in cases} - set(corpora))
    if missing:
        raise InputError(str(pp), f"no pages for {', '.join(missing[:5])} (needed by the questions)")
    ds = Dataset("financebench", str(qp), cases, corpora)
    _keep_known_evidence(ds)
    return ds


# -- generic JSONL -----------------------------------------------------------------------------------


def load_jsonl(
    path: str | Path, *, limit: int | None = None, chunk_chars: int = DEFAULT_CHUNK_CHARS
) -> Dataset:
    """One question per line: `{id?, question, answer?, options?, gold?, evidence?, documents | corpus}`.

    `documents` is a list of `{id, text}` objects or of strings (ids `doc0`, `doc1`…), or an object
    id → text. Lines with the same documents share a corpus (named by `corpus`, else by a hash of the
    documents), and a later line may give just `corpus` to reuse one defined earlier. Documents longer
    than `chunk_chars` are cut into passages `doc#i`; `evidence` may name documents or passages.
    `options` (list of texts) with `gold` (a letter) makes a multiple-choice question.
    """
    p = Path(path)
    cases: list[Case] = []
    corpora: dict[str, Corpus] = {}
    for n, obj in _jsonl(p):
        where = f"line {n}"
        question = _need(obj, "question", p, where)
        docs = obj.get("documents")
        name = obj.get("corpus")
        if docs is None:
            if not name or str(name) not in corpora:
                raise InputError(str(p), f"{where}: needs 'documents' (or 'corpus' naming an earlier line's)")
            cid = str(name)
        else:
            pairs = _documents(docs, p, where)
            cid = str(name) if name else "c" + fingerprint(pairs)[:12]
            if cid not in corpora:
                corpus = Corpus(cid)
                for doc_id, text in pairs:
                    for passage in _chunks(doc_id, text, chunk_chars):
                        corpus.add(passage)
                corpora[cid] = corpus
        options = obj.get("options")
        if options is not None and (
            not isinstance(options, list) or not all(isinstance(o, str) for o in options)
        ):
            raise InputError(str(p), f"{where}: 'options' should be a list of strings")
        gold = obj.get("gold", obj.get("label"))
        if options and gold is not None:
            gold = str(gold).strip().strip("()").upper()[:1]
            if not gold or not ("A" <= gold < chr(65 + len(options))):
                raise InputError(str(p), f"{where}: 'gold' should be a letter A–{chr(64 + len(options))}")
        answer = obj.get("answer")
        if answer is None and options and gold:
            answer = options[ord(gold) - 65]
        evidence = obj.get("evidence") or []
        if not isinstance(evidence, list):
            evidence = [evidence]
        cases.append(
            Case(
                id=str(obj.get("id") or f"line{n}"),
                question=question,
                corpus=cid,
                answer=None if answer is None else str(answer),
                options=options or None,
                gold_letter=gold if options else None,
                evidence=[str(e) for e in evidence],
                category=None if obj.get("category") is None else str(obj["category"]),
            )
        )
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise InputError(str(p), f"question id {dup!r} appears more than once (ids must be unique)")
    ds = Dataset("jsonl", str(p), _limit(cases, limit), corpora)
    _keep_known_evidence(ds)
    return _prune(ds)


def _documents(docs: Any, p: Path, where: str) -> list[tuple[str, str]]:
    if isinstance(docs, dict):
        pairs = [(str(k), v) for k, v in docs.items()]
    elif isinstance(docs, list):
        pairs = []
        for i, d in enumerate(docs):
            if isinstance(d, str):
                pairs.append((f"doc{i}", d))
            elif isinstance(d, dict) and "text" in d:
                pairs.append((str(d.get("id", f"doc{i}")), d["text"]))
            else:
                raise InputError(str(p), f"{where}: document {i} should be a string or {{id, text}}")
    else:
        raise InputError(str(p), f"{where}: 'documents' should be a list or an object")
    for doc_id, text in pairs:
        if not isinstance(text, str):
            raise InputError(str(p), f"{where}: document {doc_id!r} text should be a string")
    return pairs


# -- dispatch ----------------------------------------------------------------------------------------


def load_dataset(
    kind: str, path: str | Path, *, limit: int | None = None, pages: str | Path | None = None
) -> Dataset:
    """Load any supported dataset by kind; `pages` is FinanceBench's pages file (default: next to PATH)."""
    kind = kind.lower()
    if kind not in KINDS:
        raise UserError(f"unknown dataset kind {kind!r}: use one of {', '.join(KINDS)}")
    p = Path(path)
    if not p.exists():
        raise InputError(str(p), "no such file")
    if kind == "quality":
        return load_quality(p, limit=limit)
    if kind == "hotpotqa":
        return load_hotpotqa(p, limit=limit)
    if kind == "locomo":
        return load_locomo(p, limit=limit)
    if kind == "financebench":
        return load_financebench(p, pages, limit=limit)
    return load_jsonl(p, limit=limit)
