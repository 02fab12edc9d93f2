"""The evaluation harness without any LLM: loaders on tiny files in the real formats, metric
arithmetic checked by hand, BM25 ranking, the runner end to end with resume, and the CLI command.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from knowtree.cli.eval import eval_command
from knowtree.errors import InputError, ModelCallError, UserError
from knowtree.retrieve import LexicalIndex, Passage, query_terms
from knowtree_eval import datasets as ds
from knowtree_eval import methods as em
from knowtree_eval import metrics as m
from knowtree_eval.runner import run_eval

# -- tiny datasets in the real formats ---------------------------------------------------------------

STORY = "\n\n".join(
    f"Paragraph {i}. Korvin sat in cell {i} and the Tr'en guards asked question number {i} about "
    f"the Ruler, the ship and the planet Earth, while the lamp burned low for hour {i}."
    for i in range(20)
)


def write_quality(tmp: Path) -> Path:
    line = {
        "input": STORY,
        "instructions": [
            "Why did Korvin stay calm?\n\n (A) He was asleep \n (B) He had a plan \n (C) He was drugged \n (D) He was bored ",
            "Where was Korvin held?\n\n (A) In a ship \n (B) On Earth \n (C) In a cell \n (D) In a tree ",
            "How many words are there in this story?\n\n(A) about 10\n(B) about 20\n(C) about 30\n(D) about 40",
        ],
        "outputs": ["(B) He had a plan", "(C) In a cell", "(D) about 40"],
        "source": "quality",
        "evaluation": "exam",
    }
    path = tmp / "quality.jsonl"
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    return path


HOTPOT = [
    {
        "_id": "q1",
        "title_a": "Lisbon",
        "para_a": ["Lisbon is the capital of Portugal.", " It lies on the Tagus river."],
        "title_b": "Tagus",
        "para_b": ["The Tagus is the longest river of the Iberian Peninsula."],
        "question": "Which river flows through the capital of Portugal?",
        "answer": "Tagus",
        "supporting_facts": [[1], [0]],
        "distractors": [
            ["Madrid", ["Madrid is the capital of Spain.", " It has no large river."], 10.5],
            ["Oslo", ["Oslo is the capital of Norway, on a fjord."], 9.1],
        ],
    },
    {
        "_id": "q2",
        "title_a": "Oslo",
        "para_a": ["Oslo is the capital of Norway, on a fjord."],
        "title_b": "Norway",
        "para_b": ["Norway is a Nordic country with many fjords and mountains."],
        "question": "Oslo is the capital of which Nordic country with many fjords?",
        "answer": "Norway",
        "supporting_facts": [[0], [0]],
        "distractors": [["Madrid", ["Madrid is the capital of Spain.", " It has no large river."], 3.0]],
    },
]


def write_hotpot(tmp: Path, data: list[dict[str, Any]] | None = None) -> Path:
    path = tmp / "hotpot.json"
    path.write_text(json.dumps(HOTPOT if data is None else data), encoding="utf-8")
    return path


def write_locomo(tmp: Path) -> Path:
    conv = {
        "speaker_a": "Caroline",
        "speaker_b": "Melanie",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Caroline", "dia_id": "D1:1", "text": "Hi Mel, how are you?"},
            {"speaker": "Melanie", "dia_id": "D1:2", "text": "I painted a sunrise at the lake yesterday."},
        ],
        "session_2_date_time": "2:00 pm on 20 May, 2023",
        "session_2": [
            {
                "speaker": "Caroline",
                "dia_id": "D2:1",
                "text": "Look at this!",
                "blip_caption": "a photo of a rainbow flag mural",
            },
            {"speaker": "Melanie", "dia_id": "D2:2", "text": "I ran a charity race for mental health."},
        ],
        "session_3_date_time": "a session without turns",
    }
    qa = [
        {"question": "What did Melanie paint?", "answer": "a sunrise", "evidence": ["D1:2"], "category": 4},
        {
            "question": "What did Melanie do for mental health and paint?",
            "answer": 2022,
            "evidence": ["D1:2; D2:2", "D:2:1", "D9:9"],
            "category": 1,
        },
        {
            "question": "What did Caroline realize?",
            "evidence": ["D2:1"],
            "category": 5,
            "adversarial_answer": "x",
        },
    ]
    path = tmp / "locomo.json"
    path.write_text(json.dumps([{"sample_id": "conv-1", "conversation": conv, "qa": qa}]), encoding="utf-8")
    return path


def write_financebench(tmp: Path) -> Path:
    questions = [
        {
            "financebench_id": "fb1",
            "doc_name": "ACME_2020_10K",
            "question": "What was ACME's FY2020 capital expenditure?",
            "answer": "$120 million",
            "question_type": "metrics-generated",
            "evidence": [{"evidence_text": "capex", "doc_name": "ACME_2020_10K", "evidence_page_num": 1}],
        },
        {
            "financebench_id": "fb2",
            "doc_name": "BOLT_2021_10K",
            "question": "How much revenue did BOLT report in FY2021?",
            "answer": "$9 billion",
            "question_type": "domain-relevant",
            "evidence": [{"doc_name": "BOLT_2021_10K", "evidence_page_num": 0}],
        },
    ]
    q = tmp / "fin_questions.jsonl"
    q.write_text("\n".join(json.dumps(x) for x in questions) + "\n", encoding="utf-8")
    pages = [
        {
            "doc_name": "ACME_2020_10K",
            "num_pages": 2,
            "pages": [
                "ACME annual report cover page",
                "Purchases of property, capital expenditure $120 million",
            ],
        },
        {"doc_name": "BOLT_2021_10K", "num_pages": 1, "pages": ["BOLT revenue was $9 billion in 2021"]},
        {"doc_name": "UNUSED_2019_10K", "num_pages": 1, "pages": ["not needed"]},
    ]
    with gzip.open(tmp / "fin_pages.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(x) for x in pages) + "\n")
    return q


def write_jsonl(tmp: Path) -> Path:
    lines = [
        {
            "id": "a",
            "corpus": "notes",
            "documents": [
                {"id": "budget", "text": "Alice approved the marketing budget."},
                {"id": "db", "text": "Bruno chose PostgreSQL."},
            ],
            "question": "Who approved the budget?",
            "answer": "Alice",
            "evidence": ["budget"],
        },
        {
            "id": "b",
            "corpus": "notes",
            "question": "Which database?",
            "answer": "PostgreSQL",
            "evidence": "db",
        },
        {
            "id": "c",
            "documents": ["The launch was in Lisbon."],
            "question": "Where was the launch?",
            "options": ["Oslo", "Lisbon"],
            "gold": "(B)",
        },
    ]
    path = tmp / "generic.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


# -- loaders -----------------------------------------------------------------------------------------


def test_load_quality_parses_options_drops_leval_extras_and_chunks(tmp_path: Path) -> None:
    d = ds.load_quality(write_quality(tmp_path))
    assert [c.id for c in d.cases] == ["article1/q1", "article1/q2"]
    first = d.cases[0]
    assert first.question == "Why did Korvin stay calm?"
    assert first.options == ["He was asleep", "He had a plan", "He was drugged", "He was bored"]
    assert (first.gold_letter, first.answer) == ("B", "He had a plan")
    assert first.prompt().endswith("(D) He was bored")
    assert d.cases[1].gold_letter == "C" and not first.evidence
    corpus = d.corpora["article1"]
    assert len(corpus) > 1 and all(pid.startswith("article1#") for pid in corpus.passages)
    assert "Paragraph 19" in corpus.document_text("article1")
    assert any("L-Eval" in n for n in d.notes)
    assert len(ds.load_quality(write_quality(tmp_path), limit=1).cases) == 1


def test_load_hotpotqa_pools_every_paragraph_once(tmp_path: Path) -> None:
    d = ds.load_hotpotqa(write_hotpot(tmp_path))
    assert list(d.corpora) == ["hotpotqa"]
    corpus = d.corpora["hotpotqa"]
    assert sorted(corpus.passages) == ["Lisbon", "Madrid", "Norway", "Oslo", "Tagus"]
    assert corpus.text("Lisbon") == "Lisbon\nLisbon is the capital of Portugal. It lies on the Tagus river."
    assert d.cases[0].evidence == ["Lisbon", "Tagus"] and d.cases[0].answer == "Tagus"
    limited = ds.load_hotpotqa(write_hotpot(tmp_path), limit=1)
    assert len(limited.cases) == 1 and len(limited.corpora["hotpotqa"]) == 5  # same pool


def test_load_locomo_turns_evidence_and_categories(tmp_path: Path) -> None:
    d = ds.load_locomo(write_locomo(tmp_path))
    corpus = d.corpora["conv-1"]
    assert list(corpus.passages) == ["D1:1", "D1:2", "D2:1", "D2:2"]
    turn = corpus.passages["D2:1"]
    assert turn.text == "[2:00 pm on 20 May, 2023] Caroline: Look at this! [shares a photo of a rainbow flag mural]"
    assert turn.meta == {"speaker": "Caroline", "session": 2, "date": "2:00 pm on 20 May, 2023"}
    assert list(corpus.documents) == ["session_1", "session_2"]
    assert [c.id for c in d.cases] == ["conv-1/q0", "conv-1/q1"]  # category 5 skipped
    assert d.cases[1].evidence == ["D1:2", "D2:2", "D2:1"]  # split, repaired; D9:9 unknown
    assert d.cases[1].answer == "2022" and d.cases[1].category == "multi-hop"
    assert any("adversarial" in n for n in d.notes) and any("D9:9" in n for n in d.notes)


def test_load_financebench_pages_next_to_questions(tmp_path: Path) -> None:
    d = ds.load_dataset("financebench", write_financebench(tmp_path))
    assert set(d.corpora) == {"ACME_2020_10K", "BOLT_2021_10K"}  # the unused filing is not loaded
    assert list(d.corpora["ACME_2020_10K"].passages) == ["ACME_2020_10K#0", "ACME_2020_10K#1"]
    assert d.cases[0].evidence == ["ACME_2020_10K#1"] and d.cases[0].corpus == "ACME_2020_10K"
    pooled = ds.load_financebench(
        tmp_path / "fin_questions.jsonl", tmp_path / "fin_pages.jsonl.gz", pooled=True
    )
    assert list(pooled.corpora) == ["financebench"] and len(pooled.corpora["financebench"]) == 3
    with pytest.raises(InputError, match="pages file not found"):
        ds.load_financebench(tmp_path / "fin_questions.jsonl", tmp_path / "nope.jsonl.gz")


def test_load_jsonl_documents_corpus_reuse_and_multiple_choice(tmp_path: Path) -> None:
    d = ds.load_jsonl(write_jsonl(tmp_path))
    assert [c.corpus for c in d.cases][:2] == ["notes", "notes"]
    assert d.cases[1].evidence == ["db"]
    mc = d.cases[2]
    assert mc.options == ["Oslo", "Lisbon"] and mc.gold_letter == "B" and mc.answer == "Lisbon"
    assert list(d.corpora[mc.corpus].passages) == ["doc0"]


@pytest.mark.parametrize(
    ("kind", "content", "where"),
    [
        (
            "jsonl",
            '{"question": "q?", "documents": ["x"]}\n{"documents": ["y"]}\n',
            "line 2: missing 'question'",
        ),
        ("jsonl", '{"question": "q?", "documents": ["x"]}\nnot json\n', "line 2: not valid JSON"),
        ("hotpotqa", '[{"_id": "z9", "title_a": "A"}]', "record 0 (z9): missing 'question'"),
        (
            "quality",
            '{"input": "t", "instructions": ["no options here"], "outputs": ["(A) x"]}\n',
            "line 1, question 1",
        ),
        ("locomo", '{"not": "a list"}', "missing 'conversation'"),
    ],
)
def test_malformed_input_names_file_and_record(tmp_path: Path, kind: str, content: str, where: str) -> None:
    path = tmp_path / "bad.data"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as info:
        ds.load_dataset(kind, path)
    assert str(path) in str(info.value) and where in str(info.value)


def test_unknown_kind_and_missing_file_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="quality, locomo, financebench, hotpotqa, jsonl"):
        ds.load_dataset("squad", tmp_path / "x")
    with pytest.raises(InputError, match="no such file"):
        ds.load_dataset("jsonl", tmp_path / "missing.jsonl")


# -- metrics, by hand --------------------------------------------------------------------------------


def test_answer_metrics_match_squad_by_hand() -> None:
    assert m.normalize_answer("The  Cat, sat!") == "cat sat"
    assert m.exact_match("the Cat.", "cat") == 1.0
    assert m.exact_match("a dog", ["cat", "Dog"]) == 1.0
    assert m.exact_match(None, "cat") == 0.0
    # pred tokens [cat, sat, on, mat], gold [cat, on, mat]: P = 3/4, R = 1, F1 = 1.5 / 1.75
    assert m.token_f1("the cat sat on the mat", "cat on mat") == pytest.approx(6 / 7)
    assert m.token_f1("blue", "red") == 0.0
    assert m.token_f1("the", "a") == 1.0  # both empty after normalisation: SQuAD counts equal
    assert m.mean([1, None, 0]) == 0.5 and m.mean([None]) is None


def test_extract_choice() -> None:
    opts = ["Oslo", "Lisbon", "Madrid", "Rome"]
    assert m.extract_choice("B") == "B"
    assert m.extract_choice("(C) because it says so") == "C"
    assert m.extract_choice("D. Rome") == "D"
    assert m.extract_choice("The answer is (D).") == "D"
    assert m.extract_choice("I think option b") == "B"
    assert m.extract_choice("It must be (A), clearly") == "A"
    assert m.extract_choice("A dog barked") is None  # an article, not a choice
    assert m.extract_choice("lisbon", opts) == "B"
    assert m.extract_choice("It was Madrid, in the end", opts) == "C"
    assert m.extract_choice("Either (A) or (B)", opts) is None  # undecided
    assert m.extract_choice(None) is None
    assert m.choice_correct("(b)", "(B)") is False and m.choice_correct("(B)", "(B)")
    assert m.accuracy([True, False, None, True]) == pytest.approx(2 / 3)


def test_retrieval_metrics_by_hand() -> None:
    gold = {"g1", "g2"}
    assert m.hit_at_k(["x", "g1", "y"], gold, 1) == 0.0
    assert m.hit_at_k(["x", "g1", "y"], gold, 2) == 1.0
    assert m.hit_at_k(["x"], set(), 5) is None
    assert m.recall_at_k(["g1", "x", "g2"], gold, 2) == 0.5
    assert m.recall_at_k(["g1", "x", "g2", "g1"], gold, 4) == 1.0
    assert m.approx_tokens("abcde") == 2 and m.count_tokens("abc def", lambda s: len(s.split())) == 2
    assert m.within_budget([100, 200, 50], 250) == 1  # stops at 200; does not skip to 50
    texts = ["a" * 400, "b" * 800, "c" * 400]  # 100, 200, 100 tokens
    ranked = ["g1", "x", "g2"]
    assert m.recall_at_budget(ranked, texts, gold, 300) == 0.5
    assert m.recall_at_budget(ranked, texts, gold, 400) == 1.0
    assert m.recall_at_budget(ranked, texts, gold, 99) == 0.0


# -- BM25 --------------------------------------------------------------------------------------------


def test_bm25_ranks_the_obvious_passage_first(tmp_path: Path) -> None:
    with LexicalIndex() as idx:
        idx.add(
            [
                Passage("budget", "Alice Chen approved the marketing budget of 40000 euros.", doc="a"),
                ("launch", "The Falcon release launched in Lisbon on September 14."),
                ("db", "The platform team moved from MySQL to PostgreSQL.", {"file": "db.md"}),
            ]
        )
        assert len(idx) == 3
        hits = idx.search("Who approved the marketing budget?", k=2)
        assert hits[0][0] == "budget" and hits[0][1] > 0
        assert idx.search("Which databases did they move to?", k=1)[0][0] == "db"  # porter: databases
        assert idx.search('budget" OR (NEAR* -x:y ^AND', k=3)[0][0] == "budget"  # no FTS syntax leaks
        assert idx.search("Who was it?", k=3) == []  # stopwords only: kept, and nothing matches
        assert idx.search("budget", k=3, docs=["zzz"]) == []
        assert idx.get("db").meta == {"file": "db.md"}  # type: ignore[union-attr]
        idx.add([("launch", "Nothing about rockets here.")])  # same id: replaced
        assert len(idx) == 3 and idx.search("Falcon", k=3) == []
    assert query_terms("What did the CEO say in 2018, and was it A?") == ["ceo", "say", "2018"]
    assert query_terms("Who was it?") == ["who", "was", "it"]


def test_file_index_is_not_rebuilt_when_unchanged(tmp_path: Path) -> None:
    passages = [Passage("p1", "red apples"), Passage("p2", "green pears")]
    with LexicalIndex(tmp_path / "idx.db", name="fruit") as idx:
        assert idx.ensure(passages) is True
    with LexicalIndex(tmp_path / "idx.db", name="fruit") as idx:
        assert idx.ensure(passages) is False
        assert idx.search("pears", 1)[0][0] == "p2"
        assert idx.ensure([Passage("p3", "blue plums")]) is True and list(idx) == ["p3"]
    with pytest.raises(UserError):
        LexicalIndex(name="bad name; DROP")


def test_bm25_method_record(tmp_path: Path) -> None:
    d = ds.load_hotpotqa(write_hotpot(tmp_path))
    ctx = em.CorpusContext(d.corpora["hotpotqa"])
    record = em.BM25Method(k=2, budget=25).run(d.cases[1], ctx)
    ctx.close()
    assert set(record.retrieved) == {"Oslo", "Norway"}  # both gold paragraphs, Madrid not
    assert record.llm_calls == 0 and record.prediction is None
    # Norway's paragraph is 17 tokens and Oslo's 12: only the first fits in 25 tokens
    core = {k: record.metrics[k] for k in ("hit_rate", "recall", "recall_budget")}
    assert core == {"hit_rate": 1.0, "recall": 1.0, "recall_budget": 0.5}
    # hit within a token budget: Norway (17 tokens, a gold paragraph) fits every budget from 256 up
    assert {k: v for k, v in record.metrics.items() if k.startswith("hit_b")} == {
        f"hit_b{b}": 1.0 for b in em.BUDGETS
    }
    assert record.tokens_read == sum(m.approx_tokens(d.corpora["hotpotqa"].text(p)) for p in record.retrieved)


def test_method_registry_errors_are_one_line() -> None:
    with pytest.raises(UserError, match=r"unknown method 'nope' \(available: bm25, closed-book, embedding, ") as info:
        em.parse_methods("bm25,nope")
    assert "\n" not in str(info.value)
    em.PLANNED["someday"] = "a method not written yet"
    try:
        with pytest.raises(UserError, match="'someday' is not implemented yet"):
            em.parse_methods(["someday"])
    finally:
        del em.PLANNED["someday"]
    assert em.parse_methods(" bm25 , BM25") == ["bm25"]


# -- runner ------------------------------------------------------------------------------------------


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def test_run_eval_end_to_end_and_resume(tmp_path: Path) -> None:
    data = write_hotpot(tmp_path)
    out = tmp_path / "out"
    said: list[str] = []
    summary = run_eval("hotpotqa", data, "bm25", out, k=2, progress=said.append)
    rows = lines(out / "results.jsonl")
    assert [(r["case_id"], r["method"]) for r in rows] == [("q1", "bm25"), ("q2", "bm25")]
    assert {"retrieved", "metrics", "tokens_read", "llm_calls", "wall_s", "trace_id"} <= set(rows[0])
    s = summary["methods"]["bm25"]
    assert s["questions"] == 2 and s["hit_rate"] == 1.0 and s["llm_calls"] == 0
    run = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert run["parameters"]["k"] == 2 and run["seed"] == 0 and run["versions"]["knowtree"]
    assert run["versions"]["python"] and run["sessions"][0]["status"] == "ok"
    md = (out / "summary.md").read_text(encoding="utf-8")
    assert "| bm25 | 2 |" in md and "hit rate@2" in md and "knowtree eval hotpotqa" in md
    assert "2 to run" in said[0]

    said.clear()
    again = run_eval("hotpotqa", data, "bm25", out, k=2, progress=said.append)
    assert len(lines(out / "results.jsonl")) == 2  # nothing re-asked
    assert "0 to run; 2 already in" in said[0]
    assert again["methods"]["bm25"]["hit_rate"] == s["hit_rate"]
    assert len(json.loads((out / "run.json").read_text(encoding="utf-8"))["sessions"]) == 2

    with pytest.raises(UserError, match="k: 2 → 3"):
        run_eval("hotpotqa", data, "bm25", out, k=3, progress=False)


def test_resume_after_a_kill_mid_line_runs_only_what_is_missing(tmp_path: Path) -> None:
    data = write_hotpot(tmp_path)
    out = tmp_path / "out"
    run_eval("hotpotqa", data, "bm25", out, limit=1, progress=False)
    text = (out / "results.jsonl").read_text(encoding="utf-8")
    (out / "results.jsonl").write_text(text + text[:30], encoding="utf-8")  # a torn second line
    said: list[str] = []
    summary = run_eval("hotpotqa", data, "bm25", out, progress=said.append)
    assert "1 to run" in said[0] and "1 unreadable line" in said[0]
    assert summary["methods"]["bm25"]["questions"] == 2
    good = [
        x for x in (out / "results.jsonl").read_text(encoding="utf-8").splitlines() if x.startswith('{"case')
    ]
    assert [json.loads(x)["case_id"] for x in good if x.endswith("}")] == ["q1", "q2"]


def test_model_errors_are_recorded_and_retried_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    class Flaky:
        name = "flaky"

        def run(self, case: ds.Case, ctx: em.CorpusContext) -> em.Record:
            calls.append(case.id)
            if len(calls) == 1:
                raise ModelCallError("server down")
            record = em.base_record(case, self.name)
            record.prediction = case.answer
            record.metrics, _ = em.answer_metrics(case, record.prediction)
            record.llm_calls = 1
            return record

    monkeypatch.setitem(em._FACTORIES, "flaky", lambda p: Flaky())
    data = write_hotpot(tmp_path)
    first = run_eval("hotpotqa", data, "flaky", tmp_path / "o", progress=False)
    assert first["methods"]["flaky"]["errors"] == 1 and first["methods"]["flaky"]["em"] == 0.5
    second = run_eval("hotpotqa", data, "flaky", tmp_path / "o", progress=False)
    assert calls == ["q1", "q2", "q1"]
    assert second["methods"]["flaky"]["errors"] == 0 and second["methods"]["flaky"]["f1"] == 1.0


def test_run_eval_on_every_kind(tmp_path: Path) -> None:
    cases = {
        "quality": write_quality(tmp_path),
        "locomo": write_locomo(tmp_path),
        "financebench": write_financebench(tmp_path),
        "jsonl": write_jsonl(tmp_path),
    }
    for kind, path in cases.items():
        summary = run_eval(kind, path, "bm25", tmp_path / f"out-{kind}", progress=False)
        assert summary["methods"]["bm25"]["questions"] >= 2, kind
    fin = run_eval(
        "financebench", cases["financebench"], "bm25", tmp_path / "out-financebench", progress=False
    )
    assert fin["methods"]["bm25"]["hit_rate"] == 1.0
    assert (
        run_eval("quality", cases["quality"], "bm25", tmp_path / "q2", progress=False)["methods"]["bm25"][
            "hit_rate"
        ]
        is None
    )  # no evidence: not applicable, not 0


# -- the command -------------------------------------------------------------------------------------


def eval_app() -> typer.Typer:
    app = typer.Typer(add_completion=False)

    @app.callback()
    def main() -> None:
        """Test group (keeps `eval` a subcommand)."""

    app.command("eval")(eval_command)
    return app


def test_eval_command_prints_headline_and_writes_results(tmp_path: Path) -> None:
    data = write_hotpot(tmp_path)
    out = tmp_path / "cli-out"
    result = CliRunner().invoke(eval_app(), ["eval", "hotpotqa", str(data), "--out", str(out), "--k", "2"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert "bm25: hit rate@2: 1.000 (2 questions)" in result.stdout
    assert "tokens read:" in result.stdout and "LLM calls: 0" in result.stdout
    assert len(lines(out / "results.jsonl")) == 2
    run = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert run["sessions"][0]["argv"][0] == "knowtree"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["eval", "hotpotqa", "missing.json"], "no such file"),
        (["eval", "hotpotqa", "HOT", "--method", "bm25,nope"], "unknown method 'nope'"),
        (["eval", "trivia", "HOT"], "unknown dataset kind"),
    ],
)
def test_eval_command_errors_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    data = write_hotpot(tmp_path)
    args = [str(data) if a == "HOT" else a for a in args]
    result = CliRunner().invoke(eval_app(), [*args, "--out", str(tmp_path / "o"), "--quiet"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert result.stderr.count("\n") == 1
