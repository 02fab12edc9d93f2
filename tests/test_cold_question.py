"""Issue 36, a cold CLI question reads only what it needs: the build's modules are not imported for
it, a tree handle reads one row (no count over its nodes), the default embedder's table is not
converted at load."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from knowtree.core import KnowTree
from knowtree.retrieve.embed import get_embedder
from knowtree.store.sqlbase import SQLStoreBase
from knowtree.testing.models import KeywordModel
from test_scale_index import _tickets


def test_the_cli_imports_no_build_module() -> None:
    code = (
        "import sys, knowtree.cli.app; print(sorted(m for m in sys.modules if m in"
        " ('knowtree.building', 'knowtree.construct.builder')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_question_counts_no_node_of_its_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with KnowTree(tmp_path / "kb.db", model=KeywordModel(), summaries="none", structure="headings") as kt:
        kt.build(_tickets(tmp_path / "docs", 30), tree="t")

    def counting(self: SQLStoreBase, name: str) -> None:
        raise AssertionError("tree_info counts every node of the tree")

    monkeypatch.setattr(SQLStoreBase, "tree_info", counting)
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        tree = kt.tree("t")
        assert tree.kind == "document" and tree.root_id
        assert any(
            "code7" in e.text for e in tree.retrieve("what did dmitri file as code7?", budget_tokens=80)
        )


def test_the_default_embedders_table_is_used_as_stored() -> None:
    emb = get_embedder()
    table = getattr(emb, "_table", None)
    if table is None:
        pytest.skip("the default embedder is not a Model2Vec table")
    assert table.dtype == np.float16  # no float32 copy made at load (a cold question waited for it)
    ids = [i for i in emb._tokenizer.encode("budget approval", add_special_tokens=False).ids if i != emb._unk]
    want = table.astype(np.float32)[ids].mean(axis=0)
    got = emb.embed(["budget approval"])[0]
    assert np.allclose(got, want / np.linalg.norm(want), atol=1e-7)  # the same vectors as before
