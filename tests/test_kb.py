"""Knowledge bases (AutoKB): inputs, clustering, subtrees, solutions, compliance, Algorithm 2,
incremental adds and the CLI, with the shipped fakes (KeywordModel, FunctionModel) and the hash
embedder. Small invented data only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

import knowtree
from knowtree.answer.kb import hybrid_retrieve
from knowtree.cli.app import app
from knowtree.construct.kb import cluster, compliance
from knowtree.errors import InputError, ModelOutputError, UserError
from knowtree.ingest.kb_attributes import compare, keyword_metadata, metadata_model
from knowtree.ingest.kb_inputs import Rule, load_attributes, load_kb_docs, load_raw_issues, load_rules
from knowtree.llm.base import Completion, Model, Request, TokenLogprob
from knowtree.retrieve import Passage
from knowtree.retrieve.kbindex import KBIndexes
from knowtree.store.kb import KBIssue
from knowtree.testing.models import FunctionModel, KeywordModel

runner = CliRunner()

ISSUES = [
    ("h1", "My headphones will not pair over bluetooth with my android phone"),
    ("h2", "headphones won't pair with android phone over bluetooth"),
    ("h3", "Bluetooth pairing of the headphones fails with my iphone"),
    ("b1", "The battery of the headphones drains very fast"),
    ("b2", "headphones battery drains fast even when switched off"),
    ("n1", "Noise cancelling makes a hissing sound in quiet rooms"),
    ("n2", "hissing sound when noise cancelling is on in a quiet room"),
]
DOCS = [
    {
        "id": "pairing",
        "title": "Pairing",
        "text": "To pair the headphones, hold the power button for 7 seconds until the light flashes blue. "
        "Then choose the headphones in the Bluetooth menu of your phone. Older Android phones may need the app.",
    },
    {
        "id": "battery",
        "title": "Battery",
        "text": "A full charge lasts 30 hours. Turn off noise cancelling to save battery. "
        "If the battery drains while switched off, update the firmware with the app.",
    },
    {
        "id": "anc",
        "title": "Noise cancelling",
        "text": "A faint hiss in quiet rooms is normal with noise cancelling on. "
        "Lower the noise cancelling level in the app to reduce the hiss.",
    },
]
ATTRS = """
domain = "wireless headphones support"
[attributes.platform]
description = "the phone the headphones are used with"
values = ["android", "iphone"]
[attributes.platform.keywords]
iphone = ["ios", "apple"]
[attributes.topic]
values = ["bluetooth", "battery", "noise cancelling"]
"""
RULES = """
[[rules]]
id = "no-opening"
text = "Never tell the user to open the headphones."
forbidden = ["open the headphones"]
[[rules]]
text = "Only describe what the manual says."
"""


def write_inputs(tmp: Path, issues: list[tuple[str, str]] = ISSUES, rules: str = RULES) -> dict[str, str]:
    (tmp / "issues.jsonl").write_text("\n".join(json.dumps({"id": i, "text": t}) for i, t in issues) + "\n")
    (tmp / "docs.jsonl").write_text("\n".join(json.dumps(d) for d in DOCS) + "\n")
    (tmp / "attrs.toml").write_text(ATTRS)
    (tmp / "rules.toml").write_text(rules)
    return {
        k: str(tmp / f)
        for k, f in (
            ("issues", "issues.jsonl"),
            ("docs", "docs.jsonl"),
            ("attributes", "attrs.toml"),
            ("rules", "rules.toml"),
        )
    }


def build(
    tmp: Path, model: Any = "keyword", solutions: str = "lazy", rules: str = RULES, **kw: Any
) -> tuple[Any, Any]:
    files = write_inputs(tmp, rules=rules)
    kt = knowtree.open(tmp / "kb.db", model=model)
    report = kt.kb("hp", embedder="hash").build(solutions=solutions, **files, **kw)
    return kt, report


# -- inputs ----------------------------------------------------------------------------------
def test_raw_issues_jsonl_and_csv(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"id": "x", "text": "one"}\n\n"two words"\n')
    issues = load_raw_issues(tmp_path / "a.jsonl")
    assert (
        [i.text for i in issues] == ["one", "two words"]
        and issues[0].id == "x"
        and issues[1].id.startswith("r")
    )
    (tmp_path / "b.csv").write_text("ticket,Question,date\n7,Screen is dark,2024-01-01\n8,No sound,\n")
    rows = load_raw_issues(tmp_path / "b.csv")
    assert [(r.id, r.text, r.timestamp) for r in rows] == [
        ("7", "Screen is dark", "2024-01-01"),
        ("8", "No sound", None),
    ]


@pytest.mark.parametrize(
    ("name", "body", "where"),
    [
        ("bad.jsonl", '{"text": "ok"}\n{"text": broken\n', "line 2"),
        ("empty.jsonl", '{"text": "ok"}\n{"id": 3}\n', "line 2"),
        ("nocol.csv", "id,body2\n1,x\n", "line 1"),
        ("dup.jsonl", '{"id": 1, "text": "a"}\n{"id": 1, "text": "b"}\n', "twice"),
    ],
)
def test_bad_raw_issue_files_name_file_and_line(tmp_path: Path, name: str, body: str, where: str) -> None:
    (tmp_path / name).write_text(body)
    with pytest.raises(InputError) as err:
        load_raw_issues(tmp_path / name)
    assert name in str(err.value) and where in str(err.value)


def test_attribute_config_toml_yaml_and_errors(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(ATTRS)
    config = load_attributes(tmp_path / "a.toml")
    assert config.names() == ["platform", "topic"] and config.get("platform").keywords == {
        "iphone": ["ios", "apple"]
    }
    (tmp_path / "a.yaml").write_text("domain: d\nattributes:\n  size: [small, large]\n")
    assert load_attributes(tmp_path / "a.yaml").get("size").values == ["small", "large"]
    for body, why in [
        ("[attributes.x]\nvalues = []\n", "non-empty"),
        ('[attributes.x]\nvalues = ["any"]\n', "reserved"),
        ('domain = "d"\n', "no [attributes]"),
        ('[attributes.x\nvalues = ["a"]\n', "line 1"),
    ]:
        (tmp_path / "bad.toml").write_text(body)
        with pytest.raises(InputError) as err:
            load_attributes(tmp_path / "bad.toml")
        assert "bad.toml" in str(err.value) and why in str(err.value)


def test_rules_text_and_toml(tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text("# rules\n- See a doctor.\n2. No doses.\n\n")
    assert [r.text for r in load_rules(tmp_path / "r.txt")] == ["See a doctor.", "No doses."]
    (tmp_path / "r.toml").write_text(RULES)
    rules = load_rules(tmp_path / "r.toml")
    assert rules[0].forbidden == ["open the headphones"] and rules[1].id == "R2"
    (tmp_path / "bad.toml").write_text('[[rules]]\nid = "x"\n')
    with pytest.raises(InputError, match=r"bad\.toml: rule 1"):
        load_rules(tmp_path / "bad.toml")


def test_a_mandated_statement_must_satisfy_its_rule_and_break_none(tmp_path: Path) -> None:
    good = RULES + (
        '[[rules]]\nid = "doctor"\ntext = "Advise a doctor."\nrequired = ["see a doctor"]\n'
        'append = "If it persists,  see a doctor."\nquestion = "Does it say a doctor\'s visit is useless?"\n'
    )
    (tmp_path / "r.toml").write_text(good)
    rule = load_rules(tmp_path / "r.toml")[-1]
    assert (rule.append, rule.question) == (
        "If it persists, see a doctor.",
        "Does it say a doctor's visit is useless?",
    )
    for append, why in [
        ("Ask a pharmacist.", "lacks its own required phrase 'see a doctor'"),
        (
            "See a doctor, or open the headphones.",
            "contains 'open the headphones', forbidden by rule no-opening",
        ),
    ]:
        bad = good.replace('append = "If it persists,  see a doctor."', f"append = {json.dumps(append)}")
        (tmp_path / "bad.toml").write_text(bad)
        with pytest.raises(InputError, match=r"bad\.toml: rule 3") as err:
            load_rules(tmp_path / "bad.toml")
        assert why in str(err.value)
    (tmp_path / "t.toml").write_text('[[rules]]\ntext = "Be kind."\nthreshold = 0.6\n')
    assert load_rules(tmp_path / "t.toml")[0].threshold == 0.6
    (tmp_path / "bad.toml").write_text('[[rules]]\ntext = "Be kind."\nthreshold = 2\n')
    with pytest.raises(InputError, match="threshold must be a number between 0 and 1"):
        load_rules(tmp_path / "bad.toml")
    (tmp_path / "bad.toml").write_text('[[rules]]\ntext = "Be kind."\nappend = "Be kind."\n')
    with pytest.raises(InputError, match="append needs required phrases"):
        load_rules(tmp_path / "bad.toml")


def test_docs_records_and_markdown(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text(
        json.dumps({"doc_id": "Q1", "question": "What is X?", "answer": "X is Y."}) + "\n"
    )
    (tmp_path / "m.md").write_text("# Setup\nPlug it in.\n## Pairing\nHold the button.\n")
    secs = load_kb_docs([str(tmp_path / "d.jsonl"), str(tmp_path / "m.md")])
    assert secs[0].id == "Q1" and "X is Y." in secs[0].text
    assert any(s.path == ["Setup", "Pairing"] and "Hold the button" in s.text for s in secs)
    (tmp_path / "bad.jsonl").write_text("{}\n")
    with pytest.raises(InputError, match=r"bad\.jsonl: line 1"):
        load_kb_docs([str(tmp_path / "bad.jsonl")])


# -- metadata and clustering -------------------------------------------------------------------
def test_metadata_schema_is_constrained(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(ATTRS)
    config = load_attributes(tmp_path / "a.toml")
    model = metadata_model(config)
    assert model.model_json_schema()["properties"]["platform"]["enum"] == ["android", "iphone", "any"]
    with pytest.raises(ValidationError):
        model.model_validate({"platform": "windows phone", "topic": "battery"})
    assert keyword_metadata("pairing fails with my Apple phone over bluetooth", config) == {
        "platform": "iphone",
        "topic": "bluetooth",
    }


def test_compare_exact_subset_mismatch() -> None:
    q = {"platform": "android", "topic": "bluetooth"}
    assert compare(q, dict(q)) == "exact"
    assert compare(q, {"platform": "any", "topic": "bluetooth"}) == "subset"
    assert compare(q, {"platform": "iphone", "topic": "bluetooth"}) == "mismatch"
    assert (
        compare({"platform": "any", "topic": "bluetooth"}, q) == "narrower"
    )  # the query leaves platform unsaid
    assert (
        compare({"platform": "android", "topic": "any"}, {"platform": "any", "topic": "battery"})
        == "narrower"
    )


def test_agglomerate_merges_only_above_threshold() -> None:
    texts = [t for _, t in ISSUES]
    sim = cluster.similarity(knowtree.retrieve.get_embedder("hash").embed(texts), cluster.tfidf(texts))
    groups = cluster.agglomerate(sim, 0.3)
    assert sorted(map(sorted, groups)) == [[0, 1, 2], [3, 4], [5, 6]]
    assert len(cluster.agglomerate(sim, 0.99)) == len(texts)
    assert cluster.medoid(sim, [0, 1, 2]) in (0, 1)


# -- build -----------------------------------------------------------------------------------
def test_build_links_every_raw_issue_with_sublinear_calls(tmp_path: Path) -> None:
    kt, report = build(tmp_path, threshold=0.15, join_threshold=0.3)
    with kt:
        assert (report.raw_issues, report.clusters, report.solutions) == (7, 3, 0)
        assert report.themes >= 1 and report.parents == 3
        assert report.usage.calls < report.raw_issues  # themes + assignment + subtree batches
        rows = kt.kb("hp").export()
        parents = [r for r in rows if r["kind"] == "parent"]
        assert sorted(m for p in parents for m in p["members"]) == sorted(i for i, _ in ISSUES)
        pairing = next(p for p in parents if "h1" in p["members"])
        assert pairing["metadata"]["topic"] == "bluetooth" and pairing["metadata"]["platform"] == "any"
        kids = [r for r in rows if r["parent"] == pairing["id"]]
        assert {k["metadata"]["platform"] for k in kids} == {"android", "iphone"}
        iphone = next(k for k in kids if k["metadata"]["platform"] == "iphone")
        assert iphone["members"] == ["h3"]  # linked by its own words, not a sibling's
        shown = kt.kb("hp").show()
        assert sum(len(t["parents"]) for t in shown["themes"]) == 3 and shown["raw_issues"] == 7
        with pytest.raises(UserError, match="already exists"):
            kt.kb("hp", embedder="hash").build(**write_inputs(tmp_path))


def test_eager_solutions_cite_verified_chunks(tmp_path: Path) -> None:
    kt, report = build(tmp_path, solutions="eager", threshold=0.15, join_threshold=0.3)
    with kt:
        rows = kt.kb("hp").export()
        assert report.solutions == len(rows)
        for row in rows:
            assert row["status"] == "ok" and row["citations"]
            doc = next(d for d in DOCS if d["id"] == row["citations"][0]["doc_id"])
            assert row["citations"][0]["quote"] in doc["text"]


# -- Algorithm 2 ----------------------------------------------------------------------------
def _tiny_kb() -> tuple[dict[str, KBIssue], KBIndexes]:
    issues = {
        "p": KBIssue(
            "p", "parent", None, "c", "headphones do not pair", {"platform": "any", "topic": "bluetooth"}
        ),
        "a": KBIssue(
            "a",
            "child",
            "p",
            "c",
            "headphones do not pair (android)",
            {"platform": "android", "topic": "bluetooth"},
            1,
        ),
        "i": KBIssue(
            "i",
            "child",
            "p",
            "c",
            "headphones do not pair (iphone)",
            {"platform": "iphone", "topic": "bluetooth"},
            2,
        ),
        "x": KBIssue("x", "parent", None, "d", "battery drains", {"platform": "any", "topic": "battery"}),
    }
    idx = KBIndexes(":memory:", "t", "hash")
    idx.add("issues", [Passage(i.id, i.title, doc=i.cluster_id) for i in issues.values()])
    return issues, idx


def test_hybrid_retrieval_match_types() -> None:
    issues, idx = _tiny_kb()
    # exact: the query's metadata equals the parent's
    got = hybrid_retrieve(
        "headphones do not pair", {"platform": "any", "topic": "bluetooth"}, issues, idx, k=1
    )
    assert (got[0].issue.id, got[0].match) == ("p", "exact")
    # subset: the parent is broader; its android child matches exactly
    trace: list[dict] = []
    got = hybrid_retrieve(
        "headphones do not pair", {"platform": "android", "topic": "bluetooth"}, issues, idx, k=1, trace=trace
    )
    assert (got[0].issue.id, got[0].match) == ("a", "child-exact")
    # mismatch on a child: its parent is checked and the sibling matching exactly is taken
    got = hybrid_retrieve(
        "headphones do not pair (android)", {"platform": "iphone", "topic": "bluetooth"}, issues, idx, k=1
    )
    assert (got[0].issue.id, got[0].match, got[0].target) == ("i", "sibling-exact", "a")
    # mismatch everywhere: discarded, and the fallback is said in the trace
    trace = []
    got = hybrid_retrieve(
        "battery drains", {"platform": "any", "topic": "noise cancelling"}, issues, idx, k=1, trace=trace
    )
    assert got[0].match == "semantic" and any(s.get("step") == "fallback" for s in trace)
    assert any("discarded" in s for s in trace)


def test_ask_generates_lazy_solution_once(tmp_path: Path) -> None:
    kt, _ = build(tmp_path, threshold=0.15, join_threshold=0.3)
    with kt:
        answer = kt.kb("hp").ask("my headphones won't pair with my iphone over bluetooth")
        assert answer.issue is not None and answer.issue.metadata["topic"] == "bluetooth"
        assert answer.query_metadata == {"platform": "iphone", "topic": "bluetooth"}
        assert (
            answer.match in ("exact", "child-exact", "sibling-exact")
            and answer.issue.metadata["platform"] == "iphone"
        )
        assert answer.status == "ok" and answer.solution and answer.solution["citations"]
        assert "h3" in answer.members
        calls = kt.store.run_usage  # the second ask reads the stored solution
        again = kt.kb("hp").ask("my headphones won't pair with my iphone over bluetooth")
        assert again.solution == answer.solution
        assert any(s.get("step") == "solution" for s in answer.trace) and not any(
            s.get("step") == "solution" for s in again.trace
        )
        assert calls


def test_an_answer_brings_the_passages_for_the_query_itself(tmp_path: Path) -> None:
    kt, _ = build(tmp_path, threshold=0.15, join_threshold=0.3)
    with kt:
        kb = kt.kb("hp")
        # no raw issue asks about the charge: the issue found is a neighbour, the passages answer it
        answer = kb.ask("how many hours does a full charge last", metadata="keywords", solve=False)
        assert answer.passages and answer.passages[0]["doc_id"] == "battery"
        assert "30 hours" in answer.passages[0]["text"] and answer.passages[0]["path"]
        scores = [p["score"] for p in answer.passages]
        assert scores == sorted(scores, reverse=True) and len(answer.passages) <= 3
        data = answer.to_dict()
        assert data["passages"] == answer.passages and json.dumps(data)
        assert kb.ask("how many hours does a full charge last", metadata="keywords", solve=False, passages=0).passages == []
        assert len(kb.ask("hiss", metadata="keywords", solve=False, passages=10).passages) == 3  # every chunk


def test_query_metadata_auto_reads_keywords_where_the_configuration_gives_them_else_asks_the_model(
    tmp_path: Path,
) -> None:
    files = write_inputs(tmp_path)
    (tmp_path / "plain.toml").write_text(ATTRS.replace('[attributes.platform.keywords]\niphone = ["ios", "apple"]\n', ""))
    model = _model_with(CITED)
    kt = knowtree.open(tmp_path / "kb.db", model=model)
    with kt:
        kt.kb("hp", embedder="hash").build(solutions="lazy", threshold=0.15, join_threshold=0.3, **files)
        plain = {**files, "attributes": str(tmp_path / "plain.toml")}
        kt.kb("plain", embedder="hash").build(solutions="lazy", threshold=0.15, join_threshold=0.3, **plain)

        def asked(name: str, query: str = "my headphones will not pair with my apple phone", **kw: Any) -> tuple[str, int]:
            before = sum(r.schema_name == "kb_query_meta" for r in model.requests)  # a cached reply is no request
            answer = kt.kb(name).ask(query, solve=False, **kw)
            how = next(s["how"] for s in answer.trace if s.get("step") == "metadata")
            return how, sum(r.schema_name == "kb_query_meta" for r in model.requests) - before

        assert asked("hp") == ("keywords", 0)  # auto: the configuration names values by keywords
        assert kt.kb("hp").ask("paired with ios", solve=False).query_metadata["platform"] == "iphone"
        assert asked("hp", metadata="model") == ("model", 1)
        assert asked("plain", "the battery dies fast") == ("model", 1)  # no keywords to read: the model reads it
        with pytest.raises(UserError, match="metadata must be auto, model, keywords or none"):
            kt.kb("hp").ask("pairing", metadata="guess")


# -- solutions and compliance ----------------------------------------------------------------
def _model_with(solution_reply: Any, violated: list[str] | None = None) -> FunctionModel:
    """Solutions from `solution_reply`; the judge says "yes" (broken) to the rules whose text
    contains one of `violated`; every other role the keyword model's."""
    keyword = KeywordModel()
    replies = list(solution_reply) if isinstance(solution_reply, list) else None

    def reply(request: Request) -> Any:
        if request.schema_name == "kb_solution":
            return replies.pop(0) if replies else solution_reply
        if request.schema_name == "kb_compliance":
            asked = request.messages[-1].content.split("Question about the solution:", 1)[-1]
            return {"1": "yes" if any(v in asked for v in violated or []) else "no"}
        return keyword.reply(request)

    return FunctionModel(reply, id="kbfake")


def test_unverifiable_citation_is_dropped_and_flagged_ungrounded(tmp_path: Path) -> None:
    fake = {
        "solution": "Hold the power button.",
        "citations": [{"passage": 1, "quote": "press the secret reset pin"}],
    }
    kt, _ = build(tmp_path, model=_model_with(fake), solutions="eager", threshold=0.15, join_threshold=0.3)
    with kt:
        row = kt.kb("hp").export()[0]
        assert row["status"] == "ungrounded" and row["citations"] == []


def test_a_quote_copied_from_another_shown_passage_is_cited_from_there() -> None:
    from types import SimpleNamespace

    from knowtree.construct.kb.solutions import verify_citations
    from knowtree.records import KBChunk

    passages = [
        KBChunk(f"c{i}", f"d{i}", "manual.jsonl", [], text, "")
        for i, text in enumerate(
            ["Press the power button to turn the TV on.", "Open Settings and select Picture Mode to change it."], 1
        )
    ]
    reply = [
        SimpleNamespace(passage=1, quote="select Picture Mode to change it"),  # in passage 2, numbered 1
        SimpleNamespace(passage=2, quote="Open Settings and select Picture Mode"),
        SimpleNamespace(passage=2, quote="unplug the set for a minute"),  # in none of them
    ]
    ok, bad = verify_citations(reply, passages)
    assert [(c["chunk"], c["doc_id"], c.get("cited_as")) for c in ok] == [("c2", "d2", 1), ("c2", "d2", None)]
    assert [(c["chunk"], c["why"]) for c in bad] == [("c2", "quote not found in the passage")]


CITED = {
    "solution": "Hold the power button for 7 seconds until the light flashes blue.",
    "citations": [{"passage": 1, "quote": "hold the power button for 7 seconds"}],
}


def _first_solved(tmp_path: Path, replies: list[dict]) -> tuple[dict, dict, list[str]]:
    """Build eagerly with the solution replies cycling through `replies`: the first issue's export
    row, `show()`, and the solution prompts the model saw."""
    model = _model_with(replies * 20)
    kt, _ = build(tmp_path, model=model, solutions="eager", threshold=0.15, join_threshold=0.3)
    with kt:
        kb = kt.kb("hp")
        row, shown = kb.export()[0], kb.show()
    return row, shown, [r.messages[-1].content for r in model.requests if r.schema_name == "kb_solution"]


def test_an_uncited_solution_is_regenerated_with_the_rejected_quotes(tmp_path: Path) -> None:
    uncited = {
        "solution": "Hold the power button.",
        "citations": [{"passage": 1, "quote": "press the secret reset pin"}],
    }
    row, _, prompts = _first_solved(tmp_path, [uncited, CITED])
    assert row["status"] == "ok" and row["citations"]
    assert [(c["attempt"], c["citations"], c["kept"]) for c in row["compliance"]] == [
        (1, 0, False),
        (2, 1, True),
    ]
    assert any(
        "cited nothing that could be checked" in p and "press the secret reset pin" in p for p in prompts
    )


def test_a_worse_second_attempt_is_not_kept(tmp_path: Path) -> None:
    # the first is compliant but uncited; the regeneration breaks a rule: the first stays
    uncited = {"solution": "Hold the power button.", "citations": []}
    breaking = {"solution": "Open the headphones and reseat the battery.", "citations": CITED["citations"]}
    row, shown, _ = _first_solved(tmp_path, [uncited, breaking])
    assert row["status"] == "ungrounded" and row["solution"] == "Hold the power button."
    assert [c["kept"] for c in row["compliance"]] == [True, False] and row["compliance"][1]["violations"]
    assert "no-opening" not in json.dumps(shown)  # show() reports the kept attempt's (no) violations


def test_violation_is_fed_back_and_fixed(tmp_path: Path) -> None:
    bad = {"solution": "Open the headphones and reseat the battery.", "citations": []}
    row, _, prompts = _first_solved(tmp_path, [bad, CITED])
    assert row["compliance"][0]["violations"][0]["rule"] == "no-opening"
    assert len(row["compliance"]) == 2 and row["compliance"][1]["violations"] == []
    assert any("rule no-opening" in p for p in prompts)


def test_still_failing_solution_is_flagged(tmp_path: Path) -> None:
    fake = {
        "solution": "Hold the power button for 7 seconds.",
        "citations": [{"passage": 1, "quote": "hold the power button"}],
    }
    kt, _ = build(
        tmp_path,
        model=_model_with(fake, violated=["Only describe what the manual says"]),
        solutions="eager",
        threshold=0.15,
        join_threshold=0.3,
    )
    with kt:
        row = kt.kb("hp").export()[0]
        assert row["status"] == "flagged" and len(row["compliance"]) == 2
        assert row["compliance"][1]["violations"][0]["check"] == "model"
        answer = kt.kb("hp").ask("battery drains fast").to_dict()
    # an answer says why its solution is flagged: the rules the kept attempt still breaks
    assert answer["status"] == "flagged" and [v["check"] for v in answer["violations"]] == ["model"]
    out = runner.invoke(app, ["kb", "ask", "hp", "battery drains fast", "--db", str(tmp_path / "kb.db"), "--model", "keyword"])
    assert out.exit_code == 0, out.output
    assert f"status: flagged (breaks {answer['violations'][0]['rule']}: judged broken" in out.output


def test_a_missing_mandated_statement_is_appended_without_asking_again(tmp_path: Path) -> None:
    rules = RULES + (
        '[[rules]]\nid = "service"\ntext = "Point to the service desk."\nrequired = ["service desk"]\n'
        'append = "If that does not help, contact the service desk."\n'
    )
    model = _model_with([CITED] * 20)
    kt, _ = build(tmp_path, model=model, solutions="eager", rules=rules, threshold=0.15, join_threshold=0.3)
    with kt:
        rows = [r for r in kt.kb("hp").export() if r["solution"]]
    for row in rows:  # every attempt lacked the phrase: each got the statement, none was flagged
        assert row["status"] != "flagged"
        assert row["solution"].endswith("\n\nIf that does not help, contact the service desk.")
        assert all(a["violations"] == [] for a in row["compliance"])
        assert [(f["rule"], f["check"], f["fixed"]) for f in row["compliance"][0]["fixed"]] == [
            ("service", "required", "appended")
        ]
    cited = [r for r in rows if r["status"] == "ok"]
    assert cited and all(len(r["compliance"]) == 1 for r in cited)  # a cited one was not asked again
    generated = [r for r in model.requests if r.schema_name == "kb_solution"]
    assert len(generated) == len(rows) + sum(r["status"] == "ungrounded" for r in rows)


def test_the_judge_asks_each_rules_question_and_reads_the_log_probabilities(tmp_path: Path) -> None:
    answers = [{"no": -0.4, "yes": -1.1}, {"yes": -0.05, "no": -3.0}, {"no": -0.01, "yes": -4.6}]
    model = _ScriptedKB([_grade_tokens([a]) for a in answers] * 2)
    rules = [
        Rule(id="r1", text="Rule one."),
        Rule(id="r2", text="Never give doses.", question="Does it give a dose?"),
        Rule(id="r3", text="Rule three."),
    ]
    kt = knowtree.open(tmp_path / "j.db", model=model)
    with kt:
        p = compliance.grades(kt.client(), "tv", "Unplug the TV.", rules, ["Unplug the TV to restart it."])
        found = compliance.judge(kt.client(), "tv", "Unplug it.", rules)
        strict = [Rule(id="r1", text="Rule one.", threshold=0.3), *rules[1:]]  # its own threshold
        again = compliance.judge(
            kt.client(), "tv", "Unplug the TV.", strict, ["Unplug the TV to restart it."]
        )
    assert [v["rule"] for v in again] == ["r1", "r2"]  # the same (cached) answers, r1 now broken
    assert 0.3 < p[0] < 0.4 and p[1] > 0.9 and p[2] < 0.05  # the first "no" was a near coin flip
    assert [v["rule"] for v in found] == ["r2"]
    prompts = [r.messages[-1].content for r in model.requests]
    assert len(prompts) == 6 and all(r.logprobs == compliance.JUDGE_LOGPROBS for r in model.requests)
    assert 'break this rule? Rule: "Rule one."' in prompts[0] and prompts[1].endswith(
        'Question about the solution: Does it give a dose?\nAnswer "yes" or "no" as JSON: {"1": "yes"} or {"1": "no"}.'
    )
    assert "[1] Unplug the TV to restart it." in prompts[0] and "(none cited)" in prompts[3]
    # the solution comes before the question: one solution's prompts share everything up to it
    assert prompts[0].split("Question about")[0] == prompts[2].split("Question about")[0]


def test_a_rule_checked_by_its_phrases_only_is_never_asked_of_the_judge(tmp_path: Path) -> None:
    (tmp_path / "r.toml").write_text(
        '[[rules]]\nid = "self-contained"\ntext = "Do not send the user to the manual."\n'
        'forbidden = ["refer to the manual"]\njudged = false\n'
        '[[rules]]\nid = "kind"\ntext = "Be kind."\n'
    )
    rules = load_rules(tmp_path / "r.toml")
    assert [r.judged for r in rules] == [False, True]
    model = FunctionModel(lambda r: {"1": "no"}, id="j")
    kt = knowtree.open(tmp_path / "j.db", model=model)
    with kt:
        found = compliance.check(kt.client(), "tv", "Please refer to the manual.", rules)
        assert compliance.judge(kt.client(), "tv", "Fine.", rules[:1]) == []
    assert [(v["rule"], v["check"]) for v in found] == [("self-contained", "forbidden")]
    assert len(model.requests) == 1 and "Be kind." in model.requests[0].messages[-1].content
    for body, why in [
        ('judged = false\n', "judged = false needs forbidden or required phrases"),
        ('judged = "no"\nforbidden = ["x"]\n', "judged must be true or false"),
        ('judged = false\nforbidden = ["x"]\nthreshold = 0.5\n', "has no question or threshold"),
    ]:
        (tmp_path / "bad.toml").write_text('[[rules]]\ntext = "Be kind."\n' + body)
        with pytest.raises(InputError, match=r"bad\.toml: rule 1") as err:
            load_rules(tmp_path / "bad.toml")
        assert why in str(err.value)


def test_a_judge_reply_without_a_grade_word_is_repaired_or_raises(tmp_path: Path) -> None:
    replies = [{"1": "maybe"}, {"1": "yes"}, {"1": "no"}]
    model = FunctionModel(lambda r: replies.pop(0) if replies else {"1": "perhaps"}, id="j")
    rules = [Rule(id="a", text="A."), Rule(id="b", text="B.")]
    kt = knowtree.open(tmp_path / "j.db", model=model)
    with kt:
        assert compliance.grades(kt.client(), "tv", "Text one.", rules) == [1.0, 0.0]
        assert 'answer "yes" or "no"' in model.requests[1].messages[-1].content
        with pytest.raises(ModelOutputError):
            compliance.grades(kt.client(), "tv", "Text two.", rules)


def _grade_tokens(grades: list[dict[str, float]]) -> list[TokenLogprob]:
    """`{"1": "<g>", ...}` as the embedded model's tokens, each grade token carrying its alternatives."""
    out = [TokenLogprob(token="{", logprob=0.0, top=[("{", 0.0)])]
    for n, top in enumerate(grades, 1):
        chosen = max(top, key=lambda k: top[k])
        for piece, alternatives in [
            (f' "{n}": "', None),
            (chosen, top),
            ('",' if n < len(grades) else '"}', None),
        ]:
            alts = list((alternatives or {piece: 0.0}).items())
            out.append(TokenLogprob(token=piece, logprob=alts[0][1], top=alts))
    return out


class _ScriptedKB(Model):
    id = "scripted-kb-judge"

    def __init__(self, replies: list[list[TokenLogprob]]) -> None:
        self.replies = list(replies)
        self.requests: list[Request] = []

    def complete(self, request: Request) -> Completion:
        self.requests.append(request)
        tokens = self.replies.pop(0)
        return Completion(text="".join(t.token for t in tokens), logprobs=tokens)


# -- incremental ---------------------------------------------------------------------------------
def test_add_issues_join_or_open_clusters_and_docs_mark_stale(tmp_path: Path) -> None:
    kt, _ = build(tmp_path, threshold=0.15, join_threshold=0.3)
    with kt:
        kb = kt.kb("hp")
        kb.ask("headphones battery drains fast")  # a stored (lazy) solution
        (tmp_path / "more.jsonl").write_text(
            json.dumps({"id": "b3", "text": "the headphones battery drains fast overnight"})
            + "\n"
            + json.dumps({"id": "w1", "text": "Water got into the charging case"})
            + "\n"
            + json.dumps(
                {"id": "h1", "text": "My headphones will not pair over bluetooth with my android phone"}
            )
            + "\n"
        )
        report = kb.add(issues=str(tmp_path / "more.jsonl"))
        assert (report.raw_issues, report.joined, report.clusters, report.skipped) == (2, 1, 1, 1)
        rows = kb.export()
        battery = next(r for r in rows if "b1" in r["members"])
        assert "b3" in battery["members"] and any("w1" in r["members"] for r in rows if r["kind"] == "parent")
        got = kb.ask("battery drains fast overnight", metadata="none", solve=False)
        assert got.issue.id == battery["id"], (got.trace, rows)
        (tmp_path / "new.jsonl").write_text(
            json.dumps(
                {
                    "id": "battery2",
                    "title": "Battery care",
                    "text": "If the headphones battery drains fast, charge them fully once.",
                }
            )
            + "\n"
        )
        report = kb.add(docs=[str(tmp_path / "new.jsonl")])
        assert (
            report.restale == 1
            and next(r for r in kb.export() if r["id"] == battery["id"])["status"] == "stale"
        )


def test_bad_add_keeps_the_kb(tmp_path: Path) -> None:
    kt, _ = build(tmp_path, threshold=0.15, join_threshold=0.3)
    with kt:
        before = kt.kb("hp").export()
        (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\nnot json\n')
        with pytest.raises(InputError, match=r"bad\.jsonl: line 2"):
            kt.kb("hp").add(issues=str(tmp_path / "bad.jsonl"))
        assert kt.kb("hp").export() == before


# -- CLI -----------------------------------------------------------------------------------------
def test_cli_build_ask_show_export(tmp_path: Path) -> None:
    files = write_inputs(tmp_path)
    db = str(tmp_path / "kb.db")
    base = ["--db", db, "--model", "keyword"]
    out = runner.invoke(
        app,
        [
            "kb",
            "build",
            "hp",
            "--issues",
            files["issues"],
            "--docs",
            files["docs"],
            "--attributes",
            files["attributes"],
            "--rules",
            files["rules"],
            "--embedder",
            "hash",
            "--threshold",
            "0.4",
            "-q",
            *base,
        ],
    )
    assert out.exit_code == 0, out.output
    assert "7 raw issues" in out.output and "model calls" in out.output
    out = runner.invoke(app, ["kb", "ask", "hp", "battery drains fast", "--json", *base])
    data = json.loads(out.output)
    assert data["issue"]["id"] and data["match"] and data["solution"] and data["trace"]
    out = runner.invoke(app, ["kb", "export", "hp", "--format", "jsonl", "--db", db])
    rows = [json.loads(line) for line in out.output.splitlines()]
    assert data["issue"]["id"] in {r["id"] for r in rows} and all("members" in r for r in rows)
    assert data["passages"] and data["passages"][0]["doc_id"] == "battery"
    out = runner.invoke(app, ["kb", "ask", "hp", "battery drains fast", *base])
    assert "passages for this question:" in out.output and "[battery] Battery: A full charge" in out.output
    out = runner.invoke(app, ["kb", "show", "hp", "--db", db])
    assert out.exit_code == 0 and "●" in out.output and "solution: ok" in out.output
    # new rules: the stored solution is kept, marked stale, and regenerated under them at its next ask
    (tmp_path / "rules2.toml").write_text(
        RULES + '[[rules]]\nid = "desk"\ntext = "Name the help desk."\nrequired = ["help desk"]\n'
        'append = "The help desk can also help."\n'
    )
    out = runner.invoke(app, ["kb", "rules", "hp", "--rules", str(tmp_path / "rules2.toml"), "--db", db])
    assert out.exit_code == 0 and "1 stored solutions marked stale" in out.output, out.output
    rows = {
        json.loads(line)["id"]: json.loads(line)
        for line in runner.invoke(
            app, ["kb", "export", "hp", "--format", "jsonl", "--db", db]
        ).output.splitlines()
    }
    assert (
        rows[data["issue"]["id"]]["status"] == "stale"
        and rows[data["issue"]["id"]]["solution"] == data["solution"]
    )
    again = json.loads(runner.invoke(app, ["kb", "ask", "hp", "battery drains fast", "--json", *base]).output)
    assert again["solution"].endswith("The help desk can also help.")
    bad = runner.invoke(app, ["kb", "rules", "hp", "--rules", files["attributes"], "--db", db])
    assert bad.exit_code != 0 and "attrs.toml" in bad.output
    # without --rules: the rules the KB has now (the bad file changed nothing)
    shown = runner.invoke(app, ["kb", "rules", "hp", "--db", db])
    assert shown.exit_code == 0 and "desk: Name the help desk." in shown.output
    assert "append: The help desk can also help." in shown.output and "forbidden: open the headphones" in shown.output
    listed = json.loads(runner.invoke(app, ["kb", "rules", "hp", "--json", "--db", db]).output)
    assert [r["id"] for r in listed] == ["no-opening", "R2", "desk"] and listed[2]["required"] == ["help desk"]
    (tmp_path / "bad.toml").write_text("[attributes]\n")
    out = runner.invoke(
        app,
        [
            "kb",
            "build",
            "hp2",
            "--issues",
            files["issues"],
            "--docs",
            files["docs"],
            "--attributes",
            str(tmp_path / "bad.toml"),
            "--rules",
            files["rules"],
            *base,
        ],
    )
    assert out.exit_code == 1 and "bad.toml" in out.output
    good = ["--issues", files["issues"], "--docs", files["docs"], "--attributes", files["attributes"]]
    out = runner.invoke(
        app, ["kb", "build", "hp3", *good, "--rules", files["rules"], "--themes", "vote", *base]
    )
    assert out.exit_code == 1 and "similarity or model" in out.output
    out = runner.invoke(app, ["kb", "show", "hp3", "--db", db])
    assert out.exit_code != 0  # nothing was stored for the refused build


def test_lone_raw_issues_cost_no_subtree_call(tmp_path: Path) -> None:
    keyword = KeywordModel()
    model = FunctionModel(keyword.reply, id="counting")
    kt, report = build(tmp_path, model=model, threshold=0.99)  # every raw issue alone
    with kt:
        assert report.clusters == len(ISSUES) and report.children == 0
        assert not [r for r in model.requests if r.schema_name == "kb_subtree"]
        rows = kt.kb("hp").export()
        assert {r["title"] for r in rows} == {t for _, t in ISSUES}
        assert next(r for r in rows if r["members"] == ["h3"])["metadata"]["platform"] == "iphone"


def test_small_clusters_take_the_theme_of_the_most_similar_themed_cluster(tmp_path: Path) -> None:
    """`theme_assign="model"`: the model themes clusters of at least `theme_min` raw issues; a lone
    issue inherits the theme of the cluster it is most similar to, with no assignment call."""
    keyword = KeywordModel()
    names = ["Pairing", "Battery", "Noise"]

    def reply(request: Request) -> Any:
        prompt = request.messages[-1].content
        if request.schema_name == "kb_themes":
            return {"themes": names}
        if request.schema_name == "kb_theme_assign":
            issues = [line for line in prompt.splitlines() if line.startswith("issue_")]
            pick = {"pair": 1, "battery": 2, "hiss": 3}
            return {
                line.split(":")[0]: next((n for w, n in pick.items() if w in line.lower()), 1)
                for line in issues
            }
        return keyword.reply(request)

    model = FunctionModel(reply, id="themes")
    lone = ("b3", "battery drains overnight on the headphones")
    kt, report = build(tmp_path, model=model, threshold=0.15, join_threshold=0.95, theme_assign="model")
    with kt:
        kb = kt.kb("hp")
        (tmp_path / "lone.jsonl").write_text(json.dumps({"id": lone[0], "text": lone[1]}) + "\n")
        added = kb.add(issues=str(tmp_path / "lone.jsonl"))
        shown: dict[str, set[str]] = {}
        for row in kb.export():
            if row["kind"] == "parent":
                shown.setdefault(row["theme"], set()).update(row["members"])
    assert report.clusters == 3 and added.joined == 0 and added.clusters == 1
    assigned = [
        line
        for r in model.requests
        if r.schema_name == "kb_theme_assign"
        for line in r.messages[-1].content.splitlines()
        if line.startswith("issue_")
    ]
    assert len(assigned) == 3  # the three clusters of the build; the lone added issue was not asked
    assert "b3" in shown["Battery"] and {"h1", "h2", "h3"} <= shown["Pairing"]
    assert {"n1", "n2"} <= shown["Noise"]


def test_clusters_take_the_nearest_theme_name_without_a_call(tmp_path: Path) -> None:
    """The default `theme_assign="similarity"`: the model names the themes (one call), every cluster
    takes the theme whose name is nearest to its members; no assignment call, on build or add."""
    keyword = KeywordModel()
    names = ["Bluetooth pairing with phones", "Battery drains fast", "Noise cancelling hiss"]

    def reply(request: Request) -> Any:
        if request.schema_name == "kb_themes":
            return {"themes": names}
        return keyword.reply(request)

    model = FunctionModel(reply, id="themes-nearest")
    kt, report = build(tmp_path, model=model, threshold=0.15, join_threshold=0.95)
    with kt:
        kb = kt.kb("hp")
        (tmp_path / "lone.jsonl").write_text(
            json.dumps({"id": "b3", "text": "battery drains overnight"}) + "\n"
        )
        kb.add(issues=str(tmp_path / "lone.jsonl"))
        theme = {m: row["theme"] for row in kb.export() if row["kind"] == "parent" for m in row["members"]}
    assert not [r for r in model.requests if r.schema_name == "kb_theme_assign"]
    assert report.themes == 4  # the three names and the miscellaneous theme
    assert {theme[m] for m in ("h1", "h2", "h3")} == {names[0]}
    assert theme["b1"] == theme["b3"] == names[1] and theme["n1"] == names[2]


def test_nearest_theme_compares_centred_vectors() -> None:
    from knowtree.construct.kb import themes

    # every name and cluster shares the last dimension (the domain's words): centring removes it
    names = [[1.0, 0.0, 5.0], [0.0, 1.0, 5.0], [0.3, 0.3, 5.0]]
    clusters = [[0.9, 0.1, 4.0], [0.1, 0.9, 6.0], [0.8, 0.0, 5.0], [0.0, 0.7, 5.0]]
    assert themes.nearest(names, clusters) == [0, 1, 0, 1]


def test_an_overlong_solution_is_cut_at_a_sentence_end_not_refused() -> None:
    """The embedded engine does not enforce the schema's maxLength: a long solution is kept, cut at
    a sentence end within `SOLUTION_KEEP` characters, and the cut recorded (it used to fail
    validation three times and crash `kb ask`)."""
    from knowtree.construct.kb import solutions
    from knowtree.llm.client import LLMClient

    long = "Charge the headphones for two hours before use. " * 60  # ~2,900 characters
    model = FunctionModel(lambda request: {"solution": long, "citations": []}, id="long")
    issue = KBIssue(id="i", kind="parent", parent=None, cluster_id="c", title="battery", metadata={})
    out = solutions.generate(LLMClient(model), "headphones", issue, [], [])
    assert len(out["text"]) <= solutions.SOLUTION_KEEP and out["text"].endswith("before use.")
    assert out["cut_from"] == len(long.strip()) and len(model.requests) == 1
    short = solutions.generate(
        LLMClient(FunctionModel(lambda r: {"solution": "Charge it fully."})), "d", issue, [], []
    )
    assert short["text"] == "Charge it fully." and "cut_from" not in short
    # cut by the engine's grammar at the schema's maxLength: back to the last whole sentence
    cut = ("Charge the headphones for two hours. " * 30)[: solutions.SOLUTION_CHARS - 9] + " and then"
    at_cap = solutions.generate(LLMClient(FunctionModel(lambda r: {"solution": cut})), "d", issue, [], [])
    assert at_cap["text"].endswith("for two hours.") and at_cap["cut_from"] == len(cut)
    whole = ("Charge the headphones for two hours. " * 30)[: solutions.SOLUTION_CHARS - 1].rstrip() + "."
    kept = solutions.generate(LLMClient(FunctionModel(lambda r: {"solution": whole})), "d", issue, [], [])
    assert kept["text"] == whole and "cut_from" not in kept


def test_a_quote_longer_than_asked_is_verified_not_refused() -> None:
    """The embedded engine does not enforce the quote's maxLength either: a 250-character verbatim
    quote is checked against its passage like any other (it used to fail validation three times and
    lose the solution)."""
    from knowtree.construct.kb import solutions
    from knowtree.llm.client import LLMClient
    from knowtree.records import KBChunk

    text = " ".join(f"Step {n}: hold the power button for {n} seconds until the light flashes blue." for n in range(1, 9))
    chunk = KBChunk(id="c1", doc_id="pairing", source="manual", path=["Pairing"], text=text, context="Pairing")
    quote = text[:250].rsplit(" ", 1)[0]
    assert len(quote) > solutions.QUOTE_CHARS
    model = FunctionModel(
        lambda r: {"solution": "Hold the power button until the light flashes blue.", "citations": [{"passage": 1, "quote": quote}]},
        id="longquote",
    )
    issue = KBIssue(id="i", kind="parent", parent=None, cluster_id="c", title="pairing", metadata={})
    out = solutions.generate(LLMClient(model), "headphones", issue, [chunk], [])
    assert len(model.requests) == 1 and out["citations"] == [
        {"chunk": "c1", "doc_id": "pairing", "source": "manual", "quote": quote}
    ]
    schema = solutions.solution_model(1).model_json_schema()
    assert schema["$defs"]["SolutionCitation"]["properties"]["quote"]["maxLength"] == solutions.QUOTE_CHARS
    invented = FunctionModel(lambda r: {"solution": "x", "citations": [{"passage": 1, "quote": "y " * 150}]}, id="inv")
    bad = solutions.generate(LLMClient(invented), "headphones", issue, [chunk], [])
    assert bad["citations"] == [] and bad["unverified"][0]["why"] == "quote not found in the passage"


def test_kb_replies_over_a_schema_cap_are_cut_not_refused(tmp_path: Path) -> None:
    """maxLength / maxItems are asked for in every KB reply schema, never a reason to refuse a reply
    (the embedded engine's grammar does not always enforce them): theme names are cut to the number
    asked, a subtree title and a chunk's context sentence are clipped."""
    from knowtree.construct.kb import chunks as kbchunks
    from knowtree.construct.kb import subtrees, themes
    from knowtree.llm.client import LLMClient
    from knowtree.records import KBChunk

    names = [f"Theme number {i}" for i in range(15)]
    got = themes.propose_themes(LLMClient(FunctionModel(lambda r: {"themes": names})), "d", ["a", "b"], max_themes=10)
    assert got == [*names[:9], themes.MISC]
    assert themes.ThemeList.model_json_schema()["properties"]["themes"]["maxItems"] == 12
    (tmp_path / "a.toml").write_text(ATTRS)
    config = load_attributes(tmp_path / "a.toml")
    batch = subtrees.batch_model(config, 1)
    long_title = "Headphones " * 30
    meta = {a: "any" for a in config.names()}
    parsed = batch.model_validate({"group_1": {"title": long_title, "metadata": meta, "vary": {}}})
    assert parsed.group_1.title == long_title  # accepted; `subtree` clips it to 160
    chunk = KBChunk(id="c", doc_id="d", source="s", path=["Pairing"], text="Hold the button.", context="Pairing")
    sentence = "This chunk explains pairing. " * 20
    kbchunks.contextualize_with_model([chunk], LLMClient(FunctionModel(lambda r: {"context": sentence})), "d")
    said = chunk.context.split(": ", 1)[1]
    assert chunk.context.startswith("Pairing: ") and len(said) <= kbchunks.CONTEXT_CHARS + 1 and said.endswith("…")
