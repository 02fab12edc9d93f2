"""LoCoMo: long conversations, one corpus each, one passage per dialogue turn."""

from __future__ import annotations

import re
from pathlib import Path

from knowtree.errors import InputError
from knowtree.retrieve.bm25 import Passage
from knowtree_eval.datasets.base import Case, Corpus, Dataset
from knowtree_eval.datasets.read import keep_known_evidence, limit_cases, need, prune, read_json

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
    data = read_json(p)
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
        conv = need(sample, "conversation", p, where, dict)
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
                dia = need(turn, "dia_id", p, tw)
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
        for j, qa in enumerate(need(sample, "qa", p, where, list)):
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
                    question=need(qa, "question", p, qw),
                    corpus=sid,
                    answer=None if answer is None else str(answer),
                    evidence=list(dict.fromkeys(evidence)),
                    category=LOCOMO_CATEGORIES.get(category, None if category is None else str(category)),
                )
            )
    ds = Dataset("locomo", str(p), limit_cases(cases, limit), corpora)
    if skipped:
        ds.notes.append(f"skipped {skipped} adversarial (category 5) question(s) without an answer")
    keep_known_evidence(ds)
    return prune(ds)
