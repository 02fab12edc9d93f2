"""Tree search mode, mode selection, collections (three strategies) and expert notes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import knowtree
from knowtree.answer.search import SearchOptions, TreeSearch
from knowtree.cli.app import app
from knowtree.types import NodeKind
from pdf_maker import filler, make_pdf, with_outline
from test_documents import Counting

runner = CliRunner()


def filing(tmp_path: Path, name: str, company: str, year: int, revenue: int) -> Path:
    pages = [
        [f"{company} annual report {year}"],
        ["Business", f"{company} sells bicycles in Norway.", *filler("business", 4)],
        [
            "Financial statements",
            f"Total revenue was {revenue} million dollars in {year}.",
            *filler("numbers", 4),
        ],
        ["Risk factors", "Steel prices may rise.", *filler("risks", 4)],
    ]
    plain = make_pdf(tmp_path / f"plain-{name}", pages)
    return with_outline(
        plain, tmp_path / name, [("Business", 1, 1), ("Financial statements", 1, 2), ("Risk factors", 1, 3)]
    )


def test_search_mode_picks_sections_from_the_outline_and_cites_the_page(tmp_path: Path) -> None:
    pdf = filing(tmp_path, "acme.pdf", "Acme", 2021, 42)
    model = Counting()
    with knowtree.open(tmp_path / "kb.db", model=model, describe=False) as kt:
        kt.build([str(pdf)], tree="f")
        answer = kt.tree("f").ask("What total revenue do the financial statements show?", mode="search")
    assert answer.status == "complete"
    assert "42 million" in (answer.answer or "")
    [c] = answer.citations
    assert c.file == str(pdf) and (c.page_start, c.page_end) == (3, 3)
    assert "42 million" in c.quote
    # one search call, one answer call
    assert model.count("search") == 1 and model.count("search_answer") == 1
    search_prompt = model.prompts("search")[0]
    assert "Financial statements (p. 3)" in search_prompt
    assert "Total revenue was" not in search_prompt  # the outline has no text
    assert [s.action for s in answer.trace] == ["choose", "read"]


def test_search_answer_with_an_unverified_quote_is_not_complete(tmp_path: Path) -> None:
    pdf = filing(tmp_path, "acme.pdf", "Acme", 2021, 42)
    invented = {
        "found": True,
        "source": 1,
        "quote": "Revenue was 99 million dollars.",
        "answer": "99 million dollars",
    }
    with knowtree.open(tmp_path / "kb.db", model=Counting({"search_answer": invented}), describe=False) as kt:
        kt.build([str(pdf)], tree="f")
        answer = kt.tree("f").ask("What total revenue do the financial statements show?", mode="search")
    assert answer.status == "partial"
    assert "unverified" in (answer.answer or "")
    assert "rejected" in answer.trace[-1].outcome


def test_search_malformed_reply_falls_back_and_is_recorded(tmp_path: Path) -> None:
    pdf = filing(tmp_path, "acme.pdf", "Acme", 2021, 42)
    with knowtree.open(tmp_path / "kb.db", model=Counting({"search": "no json"}), describe=False) as kt:
        kt.build([str(pdf)], tree="f")
        answer = kt.tree("f").ask("What total revenue do the financial statements show?", mode="search")
    assert answer.trace[0].error and "fallback" in answer.trace[0].reason
    assert answer.status == "complete"  # the lexical fallback still found the section


def test_search_level_by_level_when_the_outline_does_not_fit(tmp_path: Path) -> None:
    md = "# Manual\n\n" + "".join(
        f"## Part {p}\n\n"
        + "".join(f"### Topic {p}.{t}\n\nText of topic {p}.{t} about item{p}{t}.\n\n" for t in range(6))
        for p in range(6)
    )
    path = tmp_path / "manual.md"
    path.write_text(md + "### Warranty\n\nThe warranty lasts five years.\n", encoding="utf-8")

    def pick(request: Any) -> dict[str, Any]:  # a model that knows the warranty is in the last part
        rows = re.findall(r"^\s*\[(\d+)\] (.*)$", request.messages[-1].content, flags=re.M)
        for want in ("Warranty", "Part 5"):
            hits = [int(i) for i, line in rows if line.startswith(want)]
            if hits:
                return {"thinking": want, "node_list": hits[:1]}
        return {"thinking": "none", "node_list": []}

    model = Counting({"search": pick})
    with knowtree.open(
        tmp_path / "kb.db", model=model, structure="headings", summaries="none", describe=False
    ) as kt:
        kt.build([str(path)], tree="m")
        tree = kt.tree("m")
        client = kt.client()
        searcher = TreeSearch(tree.nodes, client, SearchOptions(outline_tokens=150))
        chosen = searcher.select("How long does the warranty last?", [tree.root.id])
        full = TreeSearch(tree.nodes, client, SearchOptions(outline_tokens=100_000))
        full.select("How long does the warranty last?", [tree.root.id])
    assert [tree.nodes[c].meta.title for c in chosen] == ["Warranty"]
    assert model.count("search") >= 2  # the first round showed only the top levels
    assert "level by level" in searcher.trace[0].outcome
    assert "level by level" not in full.trace[0].outcome


def test_auto_mode_retrieves_and_searches_a_structured_tree_only_when_steered(tmp_path: Path) -> None:
    pdf = filing(tmp_path, "acme.pdf", "Acme", 2021, 42)
    md = tmp_path / "note.md"
    md.write_text("The warranty lasts five years for every frame.\n", encoding="utf-8")
    model = Counting()
    db = tmp_path / "kb.db"
    with knowtree.open(db, model=model, describe=False) as kt:
        kt.build([str(pdf)], tree="f")
        kt.build([str(md)], tree="n")
        before = len(model.requests)
        answer = kt.tree("n").ask("How long does the warranty last?")
        assert model.count("search") == 0 and model.count("read") == 0  # a chunk tree: no walk
        assert len(model.requests) - before == 1 and answer.trace[0].outcome.startswith("retrieve:")
        # a PDF's section tree: its index too (one answer call); the evidence, neighbouring sections
        # merged, spans pages 1-4, the citation names the quote's own section and page
        before = len(model.requests)
        answer = kt.tree("f").ask("What was the total revenue in 2021?")
        assert model.count("search") == 0 and len(model.requests) - before == 1
        assert answer.trace[0].outcome.startswith("retrieve:")
        assert answer.status == "complete" and "42 million" in (answer.answer or "")
        (c,) = answer.citations
        assert (c.page_start, c.page_end) == (3, 3)
        assert kt.tree("f").nodes[c.node_id].meta.title == "Financial statements"
    # an expert note that matches the question: the tree search that reads it
    assert runner.invoke(
        app, ["expert", "add", "Revenue is in the financial statements", "--tree", "f", "--db", str(db)]
    ).exit_code == 0
    with knowtree.open(db, model=model, describe=False) as kt:
        kt.tree("f").ask("What total revenue do the financial statements show?")
        assert model.count("search") == 1
        kt.tree("f").ask("Which risks are there for steel?")  # the note does not match: the index
        assert model.count("search") == 1


def test_evidence_and_answers_cite_the_page_their_text_is_on(tmp_path: Path) -> None:
    pages = [
        ["Acme annual report 2021"],
        ["Costs", "Rent was 3 million dollars for the Oslo office.", *filler("rent", 8)],
        ["Travel was 9 million dollars for the sales team.", *filler("travel", 8)],
    ]
    pdf = with_outline(make_pdf(tmp_path / "plain.pdf", pages), tmp_path / "acme.pdf", [("Costs", 1, 1)])
    with knowtree.open(tmp_path / "kb.db", model=Counting(), describe=False) as kt:
        kt.build([str(pdf)], tree="f")
        tree = kt.tree("f")
        (costs,) = [n for n in tree.nodes.values() if n.meta.title == "Costs"]
        assert (costs.spans[0].page_start, costs.spans[-1].page_end) == (2, 3)  # one leaf, two pages
        # a piece of it cites the page its text is on, not the leaf's two
        (rent,) = [e for e in tree.retrieve("Rent for the Oslo office", budget_tokens=110) if "Oslo" in e.text]
        (travel,) = tree.retrieve("How much was travel for the sales team?", budget_tokens=60)
        assert "Oslo" in rent.text and (rent.citation.page_start, rent.citation.page_end) == (2, 2)
        assert "travel" in travel.text and (travel.citation.page_start, travel.citation.page_end) == (3, 3)
        answer = tree.ask("How much was travel for the sales team?", budget_tokens=400)
    assert answer.status == "complete" and "9 million" in (answer.answer or "")
    assert (answer.citations[0].page_start, answer.citations[0].page_end) == (3, 3)  # the quote's page


def test_walk_mode_on_a_structured_tree_cites_pages(tmp_path: Path) -> None:
    pdf = filing(tmp_path, "acme.pdf", "Acme", 2021, 42)
    with knowtree.open(tmp_path / "kb.db", model=Counting(), describe=False) as kt:
        kt.build([str(pdf)], tree="f")
        answer = kt.tree("f").ask("What total revenue was in the financial statements for 2021?", mode="walk")
    assert answer.status == "complete"
    assert answer.citations[0].page_start == 3
    assert any(s.action == "read" for s in answer.trace)


def test_lazy_summaries_are_made_when_first_shown_and_kept(tmp_path: Path) -> None:
    pdf = filing(tmp_path, "acme.pdf", "Acme", 2021, 42)
    db = tmp_path / "kb.db"
    model = Counting()
    with knowtree.open(db, model=model, describe=False, summaries="lazy") as kt:
        report = kt.build([str(pdf)], tree="f")
        assert report.usage.calls == 0
        kt.tree("f").ask("What total revenue do the financial statements show?", mode="walk")
        first = model.count("leaf_meta")
        assert first >= 2  # the options shown at the root
    with knowtree.open(db, model="keyword") as kt:
        summarized = [n for n in kt.tree("f").nodes.values() if n.meta.summary]
    assert len(summarized) == first
    again = Counting()
    with knowtree.open(db, model=again) as kt:
        kt.tree("f").ask("What total revenue do the financial statements show?", mode="walk")
    assert again.count("leaf_meta") == 0  # stored: paid once


# -- collections -------------------------------------------------------------------------------------
@pytest.fixture
def collection(tmp_path: Path) -> Path:
    db = tmp_path / "kb.db"
    with knowtree.open(db, model=Counting()) as kt:
        for name, company, year, revenue in (
            ("acme-2020.pdf", "Acme", 2020, 40),
            ("acme-2021.pdf", "Acme", 2021, 42),
            ("bolt-2021.pdf", "Bolt", 2021, 77),
        ):
            pdf = filing(tmp_path, name, company, year, revenue)
            kt.build([str(pdf)], tree="c", add=True, meta={"company": company, "year": str(year)})
    return db


def test_collection_metadata_strategy_routes_to_company_and_year(collection: Path) -> None:
    model = Counting()
    with knowtree.open(collection, model=model) as kt:
        tree = kt.tree("c")
        assert tree.root.kind is NodeKind.ROOT and len(tree.root.children) == 3
        answer = tree.ask(
            "What total revenue do the financial statements show for Acme in 2021?", strategy="metadata"
        )
    assert model.count("collection_filter") == 1
    assert "company=Acme" in answer.trace[0].reason and "year=2021" in answer.trace[0].reason
    assert answer.trace[0].outcome.endswith("acme-2021.pdf")
    assert answer.status == "complete" and "42 million" in (answer.answer or "")
    assert answer.citations[0].file.endswith("acme-2021.pdf") and answer.citations[0].page_start == 3


def test_collection_reads_the_chosen_document_through_the_index(collection: Path) -> None:
    model = Counting()
    with knowtree.open(collection, model=model) as kt:
        tree = kt.tree("c")
        doc = next(c for c in tree.root.children if tree.nodes[c].spans[0].file.endswith("acme-2021.pdf"))
        scoped = tree.retrieve("total revenue", budget_tokens=4000, scope=[doc])
        assert scoped and all(e.citation.file.endswith("acme-2021.pdf") for e in scoped)
        everywhere = tree.retrieve("total revenue", budget_tokens=4000)
        assert {e.citation.file for e in everywhere} > {e.citation.file for e in scoped}
        answer = tree.ask("What total revenue do the financial statements show for Acme in 2021?")
    # auto: the documents picked first (metadata), then the chosen one read through the index
    assert model.count("collection_filter") == 1 and model.count("search") == 0
    assert model.count("search_answer") == 1
    assert answer.trace[0].outcome.endswith("acme-2021.pdf") and answer.trace[1].outcome.startswith("retrieve:")
    assert answer.status == "complete" and answer.citations[0].file.endswith("acme-2021.pdf")
    assert answer.citations[0].page_start == 3


def test_collection_metadata_relaxes_filters_and_auto_falls_back_to_descriptions(collection: Path) -> None:
    model = Counting()
    with knowtree.open(collection, model=model) as kt:
        answer = kt.tree("c").ask("What was the total revenue of Bolt in 2019?", strategy="metadata")
    assert answer.trace[0].outcome.endswith("bolt-2021.pdf")  # no 2019 filing: the year is dropped
    model = Counting({"collection_filter": {"company": "", "year": ""}})
    with knowtree.open(collection, model=model) as kt:
        answer = kt.tree("c").ask("What did the bicycle maker Bolt earn?")
    assert model.count("collection") == 1  # auto: metadata gave nothing, descriptions decide
    assert "bolt-2021.pdf" in answer.trace[0].outcome


def test_collection_describe_strategy(collection: Path) -> None:
    model = Counting()
    with knowtree.open(collection, model=model) as kt:
        answer = kt.tree("c").ask("Revenue of Bolt in 2021?", strategy="describe")
    prompt = model.prompts("collection")[0]
    assert "Bolt annual report 2021" in prompt  # the one-sentence descriptions made at build time
    assert "bolt-2021.pdf" in answer.trace[0].outcome


def test_collection_semantic_strategy_scores_documents(
    collection: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from knowtree.retrieve import embed

    monkeypatch.setattr(embed, "get_embedder", lambda name="static": embed.HashEmbedder())
    import knowtree.retrieve.vectors as vectors

    monkeypatch.setattr(vectors, "get_embedder", lambda name="static": embed.HashEmbedder())
    model = Counting()
    with knowtree.open(collection, model=model) as kt:
        answer = kt.tree("c").ask("Bolt sells bicycles: total revenue 77 million", strategy="semantic")
    assert answer.trace[0].outcome.startswith("semantic: ")
    assert "bolt-2021.pdf" in answer.trace[0].outcome.split(",")[0]
    assert "√(N+1)" in answer.trace[0].reason
    assert model.count("collection") == 0 and model.count("collection_filter") == 0
    with knowtree.open(collection, model=model) as kt:  # the index was kept in the database (either backend)
        assert kt.store.query("SELECT COUNT(*) FROM vector_indexes") == [(1,)]


# -- expert notes ------------------------------------------------------------------------------------
def test_expert_notes_cli_and_injection_into_search(tmp_path: Path) -> None:
    pdf = filing(tmp_path, "acme.pdf", "Acme", 2021, 42)
    db = tmp_path / "kb.db"
    assert (
        runner.invoke(
            app, ["build", str(pdf), "--tree", "f", "--db", str(db), "-m", "keyword", "-q"]
        ).exit_code
        == 0
    )
    r = runner.invoke(
        app,
        [
            "expert",
            "add",
            "For revenue questions look at the financial statements",
            "--tree",
            "f",
            "--db",
            str(db),
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        ["expert", "add", "Litigation is described under legal proceedings", "--tree", "f", "--db", str(db)],
    )
    assert runner.invoke(app, ["expert", "add", "x", "--tree", "nope", "--db", str(db)]).exit_code == 1
    listed = json.loads(
        runner.invoke(app, ["expert", "list", "--tree", "f", "--db", str(db), "--json"]).output
    )
    assert listed[0]["text"].startswith("For revenue")
    model = Counting()
    with knowtree.open(db, model=model) as kt:
        kt.tree("f").ask("What was the revenue?", mode="search")
        kt.tree("f").ask("What litigation is there?", mode="walk")
    search_prompt = model.prompts("search")[0]
    assert "look at the financial statements" in search_prompt
    assert "legal proceedings" not in search_prompt  # only notes that match the question
    assert any("legal proceedings" in p for p in model.prompts("choose"))
    r = runner.invoke(app, ["expert", "remove", str(listed[0]["id"]), "--db", str(db)])
    assert r.exit_code == 0
    assert runner.invoke(app, ["expert", "remove", "999", "--db", str(db)]).exit_code == 1
    model = Counting()
    with knowtree.open(db, model=model) as kt:
        kt.tree("f").ask("What was the revenue?", mode="search")
    assert "financial statements" not in model.prompts("search")[0].split("Outline:")[0]


def test_cli_ask_mode_search_prints_pages(tmp_path: Path) -> None:
    pdf = filing(tmp_path, "acme.pdf", "Acme", 2021, 42)
    db = tmp_path / "kb.db"
    assert (
        runner.invoke(
            app, ["build", str(pdf), "--tree", "f", "--db", str(db), "-m", "keyword", "-q"]
        ).exit_code
        == 0
    )
    r = runner.invoke(
        app,
        [
            "ask",
            "f",
            "What total revenue do the financial statements show?",
            "--mode",
            "search",
            "--db",
            str(db),
            "-m",
            "keyword",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "acme.pdf, p. 3" in r.output
    r = runner.invoke(app, ["ask", "f", "What?", "--mode", "fly", "--db", str(db), "-m", "keyword"])
    assert r.exit_code != 0


def test_walk_reads_an_introduction_leaf_beside_subsections_and_terminates(tmp_path: Path) -> None:
    md = (
        "# Guide\n\n## Brakes\n\nCheck the brake pads every month.\n\n"
        "## Chains\n\nOil the chain every week with a light oil, say the chain rules.\n\n"
        "### Chain tools\n\nUse a chain breaker to shorten the chain.\n\n"
        "#### Breakers\n\nA breaker pushes the pin out of the link.\n\n"
        "### Chain wear\n\nReplace a chain stretched by one percent.\n"
    )
    path = tmp_path / "guide.md"
    path.write_text(md, encoding="utf-8")
    with knowtree.open(tmp_path / "kb.db", model=Counting(), structure="headings", describe=False) as kt:
        kt.build([str(path)], tree="g")
        nodes = kt.tree("g").nodes
        chains = next(n for n in nodes.values() if n.meta.title == "Chains")
        kinds = [nodes[c].is_leaf for c in chains.children]
        assert kinds == [True, False, True]  # an introduction leaf beside a subsection with its own
        answer = kt.tree("g").ask("Which oil should be used on the chain, say the chain rules?", mode="walk")
    assert answer.status == "complete"
    assert "light oil" in (answer.answer or "")
    assert nodes[answer.citations[0].node_id].meta.title == "Chains (introduction)"


def test_auto_without_descriptions_falls_back_to_semantic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import knowtree.retrieve.vectors as vectors
    from knowtree.retrieve import embed

    monkeypatch.setattr(vectors, "get_embedder", lambda name="static": embed.HashEmbedder())
    db = tmp_path / "kb.db"
    with knowtree.open(db, model=Counting(), describe=False) as kt:
        for name, company, year, revenue in (("acme.pdf", "Acme", 2021, 42), ("bolt.pdf", "Bolt", 2021, 77)):
            kt.build(
                [str(filing(tmp_path, name, company, year, revenue))],
                tree="c",
                add=True,
                meta={"year": str(year)},
            )
    model = Counting({"collection_filter": {"year": ""}})
    with knowtree.open(db, model=model) as kt:
        answer = kt.tree("c").ask("Bolt sells bicycles: what total revenue do the financial statements show?")
    assert "metadata matched no document; semantic:" in answer.trace[0].outcome
    assert "bolt.pdf" in answer.trace[0].outcome.split(";")[1].split(",")[0]
