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


def tree_digest(db: Path, tree: str) -> str:
    with KnowTree(db, model=KeywordModel(), read_env=False) as kt:
        store = kt.store
        nodes = store.load_nodes(tree)
        docs = store.documents(tree)
        root = store.root_id(tree)
    h = hashlib.sha256(root.encode())
    for node_id in sorted(nodes):
        h.update(json.dumps(nodes[node_id].model_dump(mode="json"), sort_keys=True).encode())
    for d in sorted(docs, key=lambda d: d.path):
        h.update(json.dumps([d.path, d.sha256, d.text], sort_keys=True).encode())
    return h.hexdigest()


# (summaries, chunk_size, overlap, max_children, structure), node-set digest on main 0885d35
CASES = [
    # 102 nodes, 85 leaves
    (("none", 300, 0, 8, "auto"), "16e124bfeb73e84753049e16dcf9d9be53e401c47c4831170d459920c997df73"),
    # 167 nodes, 107 leaves
    (("none", 300, 60, 3, "auto"), "75942ec339bffc69f192f2efe67818439819f222dd70fb8796dae15faa102222"),
    # 35 nodes, 28 leaves
    (("none", 1200, 0, 8, "auto"), "7bf2aa682d4b2b8f92b6effa4d1b95459584fee1af3ea480a63290a1ddae56c3"),
    # 102 nodes, 85 leaves
    (("auto", 300, 0, 8, "auto"), "cbded14661e2dc2baff70615806ceb3500ace7fa4efb921c189d79906726924d"),
    # 41 nodes, 24 leaves
    (("none", 300, 0, 8, "headings"), "3e5a4ba6dbdb877182639a4657de92d406573ae4fda82c8da36933e0bcfa34fe"),
]


@pytest.mark.parametrize(("case", "digest"), CASES, ids=[str(i) for i in range(len(CASES))])
def test_build_matches_golden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: tuple, digest: str
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
    assert tree_digest(db, "t") == digest
