"""Issue 36, a cold question reads only what it needs (more in test_cold_question.py): a vectors
file's ids searched without a dict of every id, `import knowtree` loading no module (every public
name imported on first use), the CLI's garbage-collector thresholds and pydantic's plugins."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from knowtree.retrieve import vecfile


def test_positions_bisect_sorted_ids_first_and_answer_like_a_dict() -> None:
    ids = sorted(f"{n:04x}:0" for n in range(0, 3000, 3))
    positions = vecfile.Positions(ids)
    wanted = [ids[5], "zzzz", ids[-1], ids[0], "0001:0"]
    expected = {ids[5]: 5, ids[-1]: len(ids) - 1, ids[0]: 0}
    assert positions.of(wanted) == expected  # the first lookup: bisection
    assert positions._by_id is None
    assert positions.of(wanted) == expected  # the second: a dict, the same answer
    assert positions._by_id is not None
    unsorted = vecfile.Positions([ids[2], ids[0], ids[1]])
    assert unsorted._by_id is not None and unsorted.of([ids[0], "x"]) == {ids[0]: 1}


def test_a_vectors_file_is_written_in_id_order_with_its_rows(tmp_path: Path) -> None:
    db = str(tmp_path / "kb.db")
    ids = ["c", "a", "b", "e", "d"]
    matrix = np.arange(len(ids) * 4, dtype=np.float32).reshape(len(ids), 4)
    vecfile.save(db, "t", "emb", "content", ids, matrix)
    loaded = vecfile.load(db, "t", "emb", "content", 4)
    assert loaded is not None
    got_ids, got = loaded
    assert got_ids == sorted(ids)
    for n, i in enumerate(got_ids):
        assert np.array_equal(got[n], matrix[ids.index(i)])


def test_import_knowtree_loads_no_module_and_its_names_come_on_first_use() -> None:
    code = (
        "import sys, knowtree.cli.app; print(sorted(m for m in sys.modules if m.startswith(('knowtree', 'pydantic'))));"
        " from knowtree import Tree, open, ConfigError; import knowtree;"
        " print(Tree.__module__, open.__module__, ConfigError.__module__, 'Memory' in dir(knowtree))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    first, second = out.strip().splitlines()
    assert first == "['knowtree', 'knowtree.cli', 'knowtree.cli.app']"
    assert second == "knowtree.tree knowtree.core knowtree.errors True"
    import knowtree

    with pytest.raises(AttributeError, match="no_such_name"):
        _ = knowtree.no_such_name  # type: ignore[attr-defined]


def test_the_command_sets_the_gc_thresholds_and_leaves_pydantics_plugins_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`knowtree` (the console script's `main`) sets the collector's thresholds and has pydantic skip
    its plugin scan, unless the user set PYDANTIC_DISABLE_PLUGINS."""
    import gc
    import os

    from knowtree.cli import app

    before = gc.get_threshold()
    monkeypatch.setattr(sys, "argv", ["knowtree", "--version"])
    monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    try:
        with pytest.raises(SystemExit):
            app.main()
        assert gc.get_threshold() == app.GC_THRESHOLDS
        assert os.environ["PYDANTIC_DISABLE_PLUGINS"] == "__all__"
        monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", "")  # the user's own choice is kept
        with pytest.raises(SystemExit):
            app.main()
        assert os.environ["PYDANTIC_DISABLE_PLUGINS"] == ""
    finally:
        gc.set_threshold(*before)


def test_a_building_command_runs_with_the_bulk_thresholds_and_restores_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`knowtree build` (and the other commands that write many rows) runs its body with
    `BULK_GC_THRESHOLDS`; the thresholds are back as they were once it returns."""
    import gc

    from typer.testing import CliRunner

    import knowtree.core
    from knowtree.cli import common
    from knowtree.cli.app import app

    seen: list[tuple[int, ...]] = []
    real = knowtree.core.KnowTree.build

    def build(self: object, *args: object, **kwargs: object) -> object:
        seen.append(gc.get_threshold())
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(knowtree.core.KnowTree, "build", build)
    (tmp_path / "a.md").write_text("# A\n\nSome text about lighthouses.\n", encoding="utf-8")
    before = gc.get_threshold()
    result = CliRunner().invoke(
        app, ["build", str(tmp_path / "a.md"), "--db", str(tmp_path / "kb.db"), "--model", "keyword", "-q"]
    )
    assert result.exit_code == 0, result.output
    assert seen == [common.BULK_GC_THRESHOLDS]
    assert gc.get_threshold() == before


def test_a_new_index_looks_for_no_entry_without_a_vector_and_every_entry_has_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sync of a tree indexed for the first time writes every entry with its vector, so it does
    not look for entries without one (`unembedded`: a join over every entry); a later sync does."""
    import knowtree.store.treeindex_pg as pg
    import knowtree.store.treeindex_sqlite as lite
    from knowtree.core import KnowTree
    from knowtree.retrieve.embed import get_embedder
    from knowtree.testing.models import KeywordModel
    from test_scale_index import _tickets

    looked: list[str] = []
    real = lite.unembedded
    for module in (lite, pg):
        monkeypatch.setattr(
            module, "unembedded", lambda conn, tree, emb: looked.append(tree) or real(conn, tree, emb)
        )
    docs = _tickets(tmp_path / "docs", 40, files=2)
    with KnowTree(tmp_path / "kb.db", model=KeywordModel(), summaries="none", structure="headings") as kt:
        kt.build(docs, tree="t")
        assert looked == []
        index = kt.tree_index("t")
        assert index.entries > 40
        assert index.store.read(lambda c: real(c, "t", get_embedder().id)) == []  # every one has its vector
        with open(docs[0], "a", encoding="utf-8") as fh:
            fh.write("\n## Ticket 99\n\nErin filed ticket code99 about item1.\n")
        kt.build(docs, tree="t", replace=True)
        assert looked == ["t"]
