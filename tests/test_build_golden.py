"""The trees a build stores do not change when the build is made faster: the node set (ids, kinds,
levels, metadata, children, texts, spans) and the documents of builds of a fixed corpus hash to
values computed with the code before the throughput work (main at 0885d35). A change here changes
every user's node ids (and with them the cache, the index and every citation): it must be deliberate.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from knowtree import KnowTree
from knowtree.testing.models import KeywordModel

WORDS = "alpha beta gamma delta budget invoice refund login deploy rollback ticket owner queue".split()


def write_golden_corpus(root: Path) -> None:
    """Files of 1 to 40 short paragraphs, headings, a repeated paragraph, a nested directory."""
    rng = random.Random(36)
    for f, paras in enumerate([1, 1, 2, 3, 1, 7, 12, 40, 1, 1, 4, 25]):
        lines = [f"# Doc {f}", ""]
        for p in range(paras):
            if p and p % 6 == 0:
                lines += [f"## Part {p}", ""]
            words = [rng.choice(WORDS) for _ in range(rng.randint(8, 60))]
            lines += [" ".join(words) + ".", ""]
        if paras > 3:
            lines += ["the same paragraph twice.", "", "the same paragraph twice.", ""]
        sub = root / ("nested" if f % 3 == 0 else "top")
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"doc{f:02d}.md").write_text("\n".join(lines), encoding="utf-8")


def tree_digest(db: Path, tree: str, *, inner_titles: bool = True) -> str:
    """A hash of the tree's nodes and documents; `inner_titles=False` leaves out the branches' titles."""
    with KnowTree(db, model=KeywordModel(), read_env=False) as kt:
        store = kt.store
        nodes = store.load_nodes(tree)
        docs = store.documents(tree)
        root = store.root_id(tree)
    h = hashlib.sha256(root.encode())
    for node_id in sorted(nodes):
        row = nodes[node_id].model_dump(mode="json")
        if not inner_titles and not nodes[node_id].is_leaf:
            row["meta"].pop("title")
        h.update(json.dumps(row, sort_keys=True).encode())
    for d in sorted(docs, key=lambda d: d.path):
        h.update(json.dumps([d.path, d.sha256, d.text], sort_keys=True).encode())
    return h.hexdigest()


# (summaries, chunk_size, overlap, max_children, structure), the tree's digest, its digest without the
# branches' titles. Both computed on main 0885d35, except the full digests of the first two cases:
# their trees have branches over more than `TITLE_FILES` files, whose position titles are now bounded
# (test_position_title_is_bounded); everything else in them (ids, texts, spans, children, the other
# metadata) is main's.
CASES = [
    (  # 102 nodes, 85 leaves
        ("none", 300, 0, 8, "auto"),
        "8324403ec4779ca389395d689ed93500016e0a79f1f72cee815c946687dd82c2",
        "57c22e16a4b913079a7de3b580143b0da0676ec7272fdac5d6024c54fd1194ce",
    ),
    (  # 167 nodes, 107 leaves
        ("none", 300, 60, 3, "auto"),
        "79d665a2a4d261941a1909d121774c51f4e50d9ef9a856f2eb7a41ceac1007b5",
        "bf2200352b48c8405c8537a67242d4588bc79726f67cd4eff92308ab92404c50",
    ),
    (  # 35 nodes, 28 leaves
        ("none", 1200, 0, 8, "auto"),
        "7bf2aa682d4b2b8f92b6effa4d1b95459584fee1af3ea480a63290a1ddae56c3",
        "7523733863a8ea93dda03d69ae24d0c4a2fc3426f1d999437b0d6093e47f84a2",
    ),
    (  # 102 nodes, 85 leaves
        ("auto", 300, 0, 8, "auto"),
        "cbded14661e2dc2baff70615806ceb3500ace7fa4efb921c189d79906726924d",
        "0e521aadc7071715d8642e9d0b12f55a9e7b4fe1edf1c9535a1e0d5f980bd713",
    ),
    (  # 41 nodes, 24 leaves
        ("none", 300, 0, 8, "headings"),
        "3e5a4ba6dbdb877182639a4657de92d406573ae4fda82c8da36933e0bcfa34fe",
        "cb815cba316bbdbde8a45d6a1ae6f14333a7df51b2ec76553c46dbdcbaf3d663",
    ),
]


@pytest.mark.parametrize(("case", "digest", "untitled"), CASES, ids=[str(i) for i in range(len(CASES))])
def test_build_matches_golden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: tuple, digest: str, untitled: str
) -> None:
    summaries, chunk_size, overlap, max_children, structure = case
    corpus = tmp_path / "corpus"
    write_golden_corpus(corpus)
    monkeypatch.chdir(tmp_path)  # paths stored relative, as a user's build of ./corpus
    db = tmp_path / "kt.db"
    with KnowTree(
        db,
        model=KeywordModel(),
        read_env=False,
        summaries=summaries,
        chunk_size=chunk_size,
        chunk_overlap=overlap,
        max_children=max_children,
        structure=structure,
    ) as kt:
        kt.build(["corpus"], tree="t")
    assert tree_digest(db, "t", inner_titles=False) == untitled
    assert tree_digest(db, "t") == digest


def test_position_title_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A zero-call branch over many files names the first and the last and counts them; its title
    (and with it every piece's index context below it) no longer grows with the branch."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for f in range(256):  # 32 branches of 8 files, 4 of 64, the root
        (corpus / f"f{f:03d}.md").write_text(f"note {f} about the {WORDS[f % len(WORDS)]} queue.\n")
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "kt.db"
    with KnowTree(db, model=KeywordModel(), read_env=False, summaries="none", max_children=8) as kt:
        kt.build(["corpus"], tree="t")
        nodes = kt.store.load_nodes("t")
    titles = {n.meta.title for n in nodes.values() if n.kind.value == "branch"}
    assert max(t.count("corpus/") for t in titles) == 8  # at most TITLE_FILES files named
    assert "corpus/f000.md; …; corpus/f063.md (64 files)" in titles
    assert "; ".join(f"corpus/f{f:03d}.md" for f in range(8)) in titles  # a short one as before
