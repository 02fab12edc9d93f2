"""Every evaluation method end to end on a tiny generated dataset (scripted model), resume, and the
arithmetic of the new metrics on hand-computed cases."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from knowtree.errors import UserError
from knowtree.llm.base import Completion, Request, TokenLogprob
from knowtree.llm.client import LLMClient, MemoryCallStore
from knowtree.retrieve import HashEmbedder, Passage, VectorIndex
from knowtree.testing.models import FunctionModel, KeywordModel
from knowtree_eval import datasets as ds
from knowtree_eval import methods as em
from knowtree_eval.judge import judge_answer
from knowtree_eval.llm_methods import FullTextMethod, passage_ranges
from knowtree_eval.raptor import kmeans
from knowtree_eval.runner import run_eval
from knowtree_eval.runtime import Runtime

ALL = "bm25,embedding,hybrid,walk,search,flat,memwalker,fulltext,raptor"

TOPICS = {
    "harbor": ("harbor", "The harbor master Ingrid Solberg approved the new breakwater in March 2021."),
    "orchard": (
        "orchard",
        "The orchard cooperative chose the Jonagold apple variety for the northern slope.",
    ),
    "observatory": (
        "observatory",
        "The observatory telescope mirror was recoated with aluminium by Tomas Varga.",
    ),
}


def _document(topic: str, fact: str) -> str:
    filler = [
        f"This report about the {topic} describes routine work done during the season number {i}. "
        f"Crews inspected equipment, wrote logs, and met weekly to review progress on the {topic}."
        for i in range(1, 21)
    ]
    filler.insert(6, fact)
    return "\n\n".join(filler)


def write_dataset(tmp: Path) -> Path:
    documents = [{"id": name, "text": _document(topic, fact)} for name, (topic, fact) in TOPICS.items()]
    lines = [
        {
            "id": "q1",
            "corpus": "town",
            "documents": documents,
            "question": "Who approved the new breakwater at the harbor?",
            "answer": "Ingrid Solberg",
            "evidence": ["harbor"],
        },
        {
            "id": "q2",
            "corpus": "town",
            "question": "Which apple variety did the orchard cooperative choose?",
            "answer": "Jonagold",
            "evidence": ["orchard"],
        },
        {
            "id": "q3",
            "corpus": "town",
            "question": "What was the observatory telescope mirror recoated with?",
            "options": ["silver", "aluminium", "gold", "copper"],
            "gold": "B",
            "evidence": ["observatory"],
        },
    ]
    path = tmp / "tiny.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


class Counting(FunctionModel):
    """The keyword model, counting the requests that reach it (cache hits never do)."""

    def __init__(self) -> None:
        self.keyword = KeywordModel()
        self.seen: list[Request] = []
        super().__init__(self._reply, id="keyword")

    def _reply(self, request: Request):
        self.seen.append(request)
        return self.keyword.reply(request)


def _records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "results.jsonl").read_text(encoding="utf-8").splitlines() if x]


def test_every_method_end_to_end_with_the_scripted_model(tmp_path: Path) -> None:
    data = write_dataset(tmp_path)
    out = tmp_path / "out"
    summary = run_eval(
        "jsonl", data, ALL, out, model_object=KeywordModel(), judge_object=KeywordModel(),
        embedder="hash", progress=False,
    )  # fmt: skip
    records = _records(out)
    assert len(records) == 3 * 9 and not [r for r in records if r["error"]]
    by = {(r["method"], r["case_id"]): r for r in records}
    for method in ALL.split(","):
        for q in ("q1", "q2", "q3"):
            r = by[(method, q)]
            # every method answered, read something, and accounted for its model requests
            assert r["prediction"], (method, q)
            assert r["tokens_read"] > 0 and r["llm_calls"] >= 1 and r["trace_id"], (method, q)
            assert r["metrics"]["hit_rate"] in (0.0, 1.0)
        # the free-form questions were judged, the multiple-choice one scored by its letter
        assert by[(method, "q1")]["metrics"]["judged"] in (0.0, 1.0)
        assert "correct" in by[(method, "q3")]["metrics"] and "judged" not in by[(method, "q3")]["metrics"]
    # the walk finds the verified sentence and cites the harbor passage it read
    walk = by[("walk", "q1")]
    assert "Ingrid Solberg" in walk["prediction"] and walk["status"] == "complete"
    assert walk["metrics"]["hit_rate"] == 1.0 and walk["metrics"]["judged"] == 1.0
    assert by[("bm25", "q2")]["metrics"]["hit_rate"] == 1.0 and by[("bm25", "q2")]["llm_calls"] == 1
    # the whole corpus fits the default window: nothing cut, every passage read
    assert by[("fulltext", "q1")]["metrics"]["cut"] == 0.0
    # builds are reported apart from the questions' calls
    stats = summary["methods"]
    assert stats["walk"]["setup_calls"]["calls"] >= 4 and stats["raptor"]["setup_calls"]["calls"] >= 1
    assert stats["bm25"]["setup_calls"] == {}
    md = (out / "summary.md").read_text(encoding="utf-8")
    for method in ALL.split(","):
        assert f"| {method} | 3 |" in md
    run = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert run["sessions"][-1]["model_id"] == "keyword" and run["resume_key"]["judge"] is None
    pytest.importorskip("matplotlib")
    for png in ("accuracy_vs_tokens.png", "hit_rate_vs_budget.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
        assert f"]({png})" in md


def test_resumed_run_reasks_no_finished_question(tmp_path: Path) -> None:
    data = write_dataset(tmp_path)
    out = tmp_path / "out"
    first = Counting()
    one = run_eval("jsonl", data, ALL, out, limit=1, model_object=first, embedder="hash", progress=False)
    assert first.seen and len(_records(out)) == 9
    second = Counting()
    two = run_eval("jsonl", data, ALL, out, model_object=second, embedder="hash", progress=False)
    # the builds were prepared again from the cache: counted once, not twice
    for method in ("walk", "raptor"):
        assert two["methods"][method]["setup_calls"] == one["methods"][method]["setup_calls"]
    assert len(_records(out)) == 27
    # the finished question was not asked again (and the builds came back from the cache)
    asked = [m.content for r in second.seen for m in r.messages]
    assert asked and not any("Who approved the new breakwater" in text for text in asked)
    assert not [r for r in second.seen if r.schema_name in ("leaf_meta", "branch_meta", "raptor_summary")]
    third = Counting()
    run_eval("jsonl", data, ALL, out, model_object=third, embedder="hash", progress=False)
    assert third.seen == [] and len(_records(out)) == 27  # everything finished: not one request


def test_named_subsets(tmp_path: Path) -> None:
    data = write_dataset(tmp_path)
    summary = run_eval("jsonl", data, "bm25", tmp_path / "o", per_corpus=2, progress=False)
    assert summary["questions"] == 2
    summary = run_eval("jsonl", data, "bm25", tmp_path / "p", corpora=0, progress=False)
    assert summary["questions"] == 0
    summary = run_eval("jsonl", data, "bm25", tmp_path / "q", corpus="town", limit=1, progress=False)
    assert summary["questions"] == 1 and "--corpus town --limit 1" in summary["command"]
    with pytest.raises(UserError, match="no corpus named nope"):
        run_eval("jsonl", data, "bm25", tmp_path / "r", corpus="nope", progress=False)


def test_skip_takes_the_questions_after_the_first_n(tmp_path: Path) -> None:
    data = write_dataset(tmp_path)
    first = run_eval("jsonl", data, "bm25", tmp_path / "a", limit=1, progress=False)
    second = run_eval("jsonl", data, "bm25", tmp_path / "b", skip=1, limit=5, progress=False)
    assert first["questions"] == 1 and second["questions"] >= 1
    ids = [{r["case_id"] for r in _records(tmp_path / d)} for d in ("a", "b")]
    assert ids[0].isdisjoint(ids[1])
    assert "--skip 1 --limit 5" in second["command"]
    with pytest.raises(UserError, match="--skip must be 0 or more"):
        run_eval("jsonl", data, "bm25", tmp_path / "c", skip=-1, progress=False)


# -- arithmetic on hand-computed cases -------------------------------------------------------------


def _corpus(sizes: dict[str, int]) -> ds.Corpus:
    corpus = ds.Corpus("c")
    for pid, chars in sizes.items():
        corpus.add(Passage(pid, "x" * chars, doc="d"))
    return corpus


def test_hit_rate_within_budgets_by_hand() -> None:
    # p1 is 300 tokens (1200 chars / 4) and not gold, p2 is 100 tokens and gold
    corpus = _corpus({"p1": 1200, "p2": 400})
    ctx = em.CorpusContext(corpus)
    case = ds.Case(id="q", question="?", corpus="c", evidence=["p2"])
    out = em.retrieval_metrics(case, ctx, ["p1", "p2"], k=1, budget=350)
    # budget 256: p1 does not fit, reading stops there (0 passages); 512: both fit (400 tokens)
    assert out["hit_b256"] == 0.0 and out["hit_b512"] == 1.0 and out["hit_b4096"] == 1.0
    assert out["hit_rate"] == 0.0 and out["recall_budget"] == 0.0  # top 1 = p1; 350 tokens: p1 only
    read = em.read_metrics(
        ds.Case(id="q", question="?", corpus="c", evidence=["p2", "p3"]), ctx, ["p1", "p2"]
    )
    assert read == {"hit_rate": 1.0, "recall": 0.5}


def test_fulltext_cut_by_hand(tmp_path: Path) -> None:
    from knowtree.core import KnowTree

    corpus = _corpus({f"p{i}": 1000 for i in range(4)})  # 4 × 250 tokens
    runtime = Runtime(db=str(tmp_path / "kt.db"))
    runtime._kt = KnowTree(tmp_path / "kt.db", model=KeywordModel(), n_ctx=3000)
    ctx = em.CorpusContext(corpus, runtime=runtime)
    case = ds.Case(id="q", question="q?", corpus="c", answer="x", evidence=["p3"])
    # window 3000 tokens, no reserve, 1 char per token: 3000 chars; each passage takes 1000 + 2 (separator)
    record = FullTextMethod(reserve_tokens=0, chars_per_token=1.0).run(case, ctx)
    runtime.close()
    assert record.retrieved == ["p0", "p1"] and record.tokens_read == 500
    assert record.metrics["cut"] == 0.5 and record.metrics["hit_rate"] == 0.0


def test_passage_ranges_match_the_joined_document() -> None:
    corpus = ds.Corpus("c")
    for pid, text in (("a", "alpha"), ("b", "beta!"), ("c", "gamma")):
        corpus.add(Passage(pid, text, doc="d"))
    joined = corpus.document_text("d", "\n\n")
    assert [joined[s:e] for _, s, e in passage_ranges(corpus)["d"]] == ["alpha", "beta!", "gamma"]


def test_kmeans_is_deterministic_and_separates_clear_groups() -> None:
    import numpy as np

    vectors = np.array([[1, 0], [0.99, 0.1], [0, 1], [0.1, 0.99], [0.98, 0.05]], dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    labels = kmeans(vectors, 2, seed=3)
    assert labels == kmeans(vectors, 2, seed=3)
    assert labels[0] == labels[1] == labels[4] != labels[2] == labels[3]


def test_vector_index_persists_and_filters(tmp_path: Path) -> None:
    passages = [Passage("a", "red apples grow here", doc="x"), Passage("b", "green pears ripen", doc="y")]
    with VectorIndex(tmp_path / "v.db", name="fruit", embedder=HashEmbedder(64)) as idx:
        assert idx.ensure(passages) is True
        assert idx.search("apples", 1)[0][0] == "a"
    with VectorIndex(tmp_path / "v.db", name="fruit", embedder=HashEmbedder(64)) as idx:
        assert idx.ensure(passages) is False  # unchanged corpus: not embedded again
        assert [p for p, _ in idx.search("apples", 5, docs=["y"])] == ["b"]
        assert idx.search("apples", 0) == []


def test_judge_needs_no_call_for_no_answer() -> None:
    model = Counting()
    client = LLMClient(model, MemoryCallStore())
    assert judge_answer(client, "Who?", "Ingrid", None).correct is False
    assert judge_answer(client, "Who?", "Ingrid", "unknown").correct is False
    assert model.seen == []
    assert judge_answer(client, "Who?", "Ingrid Solberg", "It was Ingrid Solberg.").correct is True
    assert len(model.seen) == 1 and model.seen[0].schema_name == "judge"


def test_reciprocal_rank_fusion_by_hand() -> None:
    from knowtree.retrieve import reciprocal_rank_fusion

    fused = reciprocal_rank_fusion([["a", "b"], ["b", "c"]], c=60)
    assert [pid for pid, _ in fused] == ["b", "a", "c"]
    assert fused[0][1] == pytest.approx(1 / 62 + 1 / 61) and fused[2][1] == pytest.approx(1 / 62)


def test_eval_command_with_a_model_a_judge_and_a_subset(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from knowtree.cli.app import app

    data = write_dataset(tmp_path)
    out = tmp_path / "o"
    args = ["eval", "jsonl", str(data), "--method", "bm25,walk", "--model", "keyword"]
    args += ["--judge", "same", "--per-corpus", "2", "--embedder", "hash", "--out", str(out), "--quiet"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "walk: EM: " in result.output and "judged accuracy: " in result.output
    run = json.loads((out / "run.json").read_text(encoding="utf-8"))
    # the dataset has a multiple-choice question (left out here): two readings are the run's reader
    assert run["command"].endswith(f"--judge same --per-corpus 2 --choice-reads 2 --k 5 --budget 2048 --out {out}")
    assert run["dataset"]["questions"] == 2 and len(_records(out)) == 4


# -- multiple choice: the letters' probabilities, the reader's lean divided out --------------------


def _tokens(*parts: tuple[str, list[tuple[str, float]]]) -> list[TokenLogprob]:
    return [TokenLogprob(token=t, logprob=top[0][1] if top else 0.0, top=top) for t, top in parts]


def test_letter_probs_are_read_where_the_answer_writes_its_letter() -> None:
    from knowtree_eval.runtime import letter_probs

    ln = math.log
    split = _tokens(
        ('{"', []), ("answer", []), ('":', []), (' "(', [(' "(', ln(0.9))]),
        ("C", [("C", ln(0.5)), ("B", ln(0.3)), (" A", ln(0.1)), ("The", ln(0.05))]),
        (") They left", []), ('"}', []),
    )
    probs = letter_probs(split, 4)
    assert probs is not None and probs == pytest.approx({"A": 0.1 / 0.9, "B": 0.3 / 0.9, "C": 0.5 / 0.9, "D": 0.0})
    joined = _tokens(('{"answer": "', []), ("(D", [("(D", ln(0.6)), ("(A", ln(0.2))]), (") x", []), ('"}', []))
    assert letter_probs(joined, 4) == pytest.approx({"A": 0.25, "B": 0.0, "C": 0.0, "D": 0.75})
    assert letter_probs(_tokens(('{"answer": "', []), ("the cat", [("the", ln(0.9))]), ('"}', [])), 4) is None
    # a letter beyond the options is not one of them
    assert letter_probs(_tokens(('{"answer": "', []), ("E", [("E", ln(0.9))]), ('"}', [])), 4) is None


def test_read_answer_asks_for_the_alternatives_only_for_multiple_choice() -> None:
    from knowtree.core import KnowTree
    from knowtree_eval.runtime import read_answer

    seen: list[int] = []

    def model(request: Any) -> Any:
        seen.append(request.logprobs)
        if not request.logprobs:
            return {"answer": "Oslo"}
        text = '{"answer": "(B) Oslo"}'
        tokens = _tokens(('{"answer": "(', []), ("B", [("B", math.log(0.7)), ("A", math.log(0.3))]), (') Oslo"}', []))
        return Completion(text=text, input_tokens=10, output_tokens=5, logprobs=tokens)

    with KnowTree(":memory:", model=FunctionModel(model, id="m")) as kt:
        client = kt.client()
        assert read_answer(client, ds.Case("q1", "Where?", "c"), "In Oslo.") == ("Oslo", None, None)
        choice = ds.Case("q2", "Where?", "c", options=["Bergen", "Oslo"], gold_letter="B")
        answer, probs, readings = read_answer(client, choice, "In Oslo.")
        assert read_answer(client, ds.Case("q3", "Where now?", "c"), "In Oslo.", reads=2) == ("Oslo", None, None)
    assert answer == "(B) Oslo" and probs == pytest.approx({"A": 0.3, "B": 0.7}) and readings is None
    assert seen[0] == 0 and seen[1] > 0 and seen[2] == 0 and len(seen) == 3  # a free-form question: read once


def _leaning_reader(lean: dict[str, float], right: str, seen: list[list[str]]) -> Any:
    """A reader whose letter probabilities are (2 for the right option's text, else 1) × its lean
    towards the letter the option is shown at; it writes the letter it likes best."""

    def model(request: Any) -> Any:
        prompt = request.messages[-1].content
        shown = re.findall(r"^\(([A-D])\) (.+)$", prompt, re.M)
        if not shown:
            return {"answer": "Ingrid Solberg"}
        seen.append([text for _, text in shown])
        weight = {letter: (2.0 if text == right else 1.0) * lean[letter] for letter, text in shown}
        total = sum(weight.values())
        best = max(weight, key=lambda k: weight[k])
        top = [(letter, math.log(w / total)) for letter, w in weight.items()]
        text = dict(shown)[best]
        tokens = _tokens(('{"answer": "(', []), (best, top), (f') {text}"}}', []))
        return Completion(text=f'{{"answer": "({best}) {text}"}}', input_tokens=10, output_tokens=5, logprobs=tokens)

    return model


def test_two_readings_with_the_options_rotated_offset_the_readers_lean() -> None:
    from knowtree.core import KnowTree
    from knowtree_eval.runtime import read_answer

    lean = {"A": 0.5, "B": 1.0, "C": 2.0, "D": 1.0}  # the 1.5B model's: away from A, towards C
    options = ["the right one", "west", "north", "east"]
    case = ds.Case("q", "Which?", "c", options=options, gold_letter="A")
    seen: list[list[str]] = []
    with KnowTree(":memory:", model=FunctionModel(_leaning_reader(lean, "the right one", seen), id="m")) as kt:
        once = read_answer(kt.client(), case, "text")
        twice = read_answer(kt.client(), case, "text", reads=2)
        four = read_answer(kt.client(), case, "text", reads=4)
    assert once[0] == "(C) north" and once[2] is None  # the lean wins a single reading
    # the second reading shows C D A B: the right option at the letter the reader likes
    assert seen[1] == ["north", "east", "the right one", "west"]
    answer, probs, readings = twice
    assert readings is not None and len(readings) == 2
    assert readings[0] == pytest.approx({"A": 0.2, "B": 0.2, "C": 0.4, "D": 0.2})
    assert readings[1] == pytest.approx({"A": 4 / 6.5, "B": 1 / 6.5, "C": 0.5 / 6.5, "D": 1 / 6.5})
    assert probs == pytest.approx({k: (readings[0][k] + readings[1][k]) / 2 for k in "ABCD"})
    assert answer == "(A) the right one"  # by the options' own letters, whatever the reading showed
    # four readings: every place once (the two shown already come from the cache)
    assert seen[2:] == [options[i:] + options[:i] for i in (1, 3)]
    assert four[0] == "(A) the right one" and four[2] is not None and len(four[2]) == 4
    with KnowTree(":memory:", model=FunctionModel(_leaning_reader(lean, "the right one", []), id="m")) as kt:
        many = read_answer(kt.client(), case, "text", reads=9)  # no more readings than places
    assert many[2] is not None and len(many[2]) == 4 and many[1] == pytest.approx(four[1])


def test_eval_reads_each_multiple_choice_question_twice(tmp_path: Path) -> None:
    from knowtree_eval.runner import run_eval

    data = write_dataset(tmp_path)
    lean = {"A": 0.5, "B": 1.0, "C": 2.5, "D": 1.0}
    seen: list[list[str]] = []
    reader = FunctionModel(_leaning_reader(lean, "aluminium", seen), id="m")
    out = tmp_path / "o"
    run = {"model_object": reader, "progress": False, "embedder": "hash", "budget": 300}
    run_eval("jsonl", data, "fulltext,retrieve", out, corpus="town", **run)  # two readings by default
    records = {(r["method"], r["case_id"]): r for r in _records(out)}
    for method in ("fulltext", "retrieve"):
        mc = records[(method, "q3")]
        assert len(mc["choice_reads"]) == 2 and mc["choice"] == "B" and mc["metrics"]["correct"] == 1.0
        free = records[(method, "q1")]
        assert free["error"] is None and free["prediction"] == "Ingrid Solberg" and free["choice_reads"] is None
    assert ["gold", "copper", "silver", "aluminium"] in seen  # the second reading, rotated by two
    info = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert "--choice-reads 2" in info["command"] and info["resume_key"]["choice_reads"] == 2
    with pytest.raises(UserError, match="choice_reads: 2 → None"):  # one reading is another evaluation
        run_eval("jsonl", data, "fulltext", out, corpus="town", choice_reads=1, **run)
    with pytest.raises(UserError, match="at least 1"):
        run_eval("jsonl", data, "fulltext", tmp_path / "o2", choice_reads=0, **run)
    once = tmp_path / "once"
    run_eval("jsonl", data, "fulltext", once, corpus="town", choice_reads=1, **run)
    assert [r["choice"] for r in _records(once) if r["case_id"] == "q3"] == ["C"]  # the reader's lean wins
    # the run's identity is the dataset's, whatever the subset: a first run of free-form questions
    # resumes with the multiple-choice one
    part = tmp_path / "part"
    run_eval("jsonl", data, "fulltext", part, corpus="town", per_corpus=2, **run)
    assert json.loads((part / "run.json").read_text(encoding="utf-8"))["resume_key"]["choice_reads"] == 2
    run_eval("jsonl", data, "fulltext", part, corpus="town", **run)
    assert len(_records(part)) == 3
    # a dataset without multiple choice is read as before: nothing about readings in its identity
    free = tmp_path / "free.jsonl"
    free.write_text("".join(x + "\n" for x in data.read_text().splitlines() if '"options"' not in x))
    run_eval("jsonl", free, "fulltext", tmp_path / "f", corpus="town", **run)
    info = json.loads((tmp_path / "f" / "run.json").read_text(encoding="utf-8"))
    assert "choice_reads" not in info["resume_key"] and "--choice-reads" not in info["command"]


def test_without_log_probabilities_a_question_is_read_once() -> None:
    from knowtree.core import KnowTree
    from knowtree_eval.runtime import read_answer

    calls: list[int] = []

    def model(request: Any) -> Any:
        calls.append(1)
        return {"answer": "(C) north"}

    case = ds.Case("q", "Which?", "c", options=["a", "b", "north", "d"], gold_letter="A")
    with KnowTree(":memory:", model=FunctionModel(model, id="m")) as kt:
        assert read_answer(kt.client(), case, "text", reads=2) == ("(C) north", None, None)
    assert len(calls) == 1


def test_calibrated_accuracy_divides_out_the_readers_lean_without_the_gold_letters() -> None:
    from knowtree_eval.base import Record
    from knowtree_eval.summary import calibrated_accuracy

    def rec(gold: str, probs: dict[str, float] | None, choice: str) -> Record:
        r = Record(case_id=gold + choice, method="m", corpus="c", question="q", gold_letter=gold, choice=choice)
        r.choice_probs = probs
        r.metrics["correct"] = float(choice == gold)
        return r

    leaning = [  # a reader that writes C whenever it is unsure
        rec("C", {"A": 0.1, "B": 0.1, "C": 0.7, "D": 0.1}, "C"),
        rec("A", {"A": 0.4, "B": 0.05, "C": 0.5, "D": 0.05}, "C"),
        rec("B", {"A": 0.05, "B": 0.4, "C": 0.5, "D": 0.05}, "C"),
        rec("D", {"A": 0.1, "B": 0.1, "C": 0.3, "D": 0.5}, "D"),
    ]
    assert sum(r.metrics["correct"] for r in leaning) == 2
    assert calibrated_accuracy(leaning) == 1.0  # C's mean 0.5 divided out: A and B win where they were close
    assert calibrated_accuracy([rec("A", None, "A")]) is None  # no distribution: nothing to re-read
    mixed = [*leaning, rec("A", None, "B")]  # a record without one keeps its letter
    assert calibrated_accuracy(mixed) == pytest.approx(4 / 5)
