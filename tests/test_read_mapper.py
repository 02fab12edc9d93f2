"""`load_each` runs its reads through a `mapper` when given one (Ray tasks: `distributed.Cluster.mapper`):
the same documents in the same order, bad files reported as without it, also after a pickle round
trip (what a Ray task sends back)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from knowtree.errors import InputError
from knowtree.ingest import load_documents
from knowtree.ingest.problems import BadFilesError
from knowtree.ingest.sources import load_sources


def _corpus(tmp_path: Path) -> Path:
    root = tmp_path / "c"
    root.mkdir()
    for i in range(5):
        (root / f"d{i}.md").write_text(f"# D{i}\n\nbody {i}\n")
    return root


def test_a_mapper_reads_every_file_and_gives_the_same_documents(tmp_path: Path) -> None:
    from knowtree.distributed import read_files

    root = _corpus(tmp_path)
    seen: list[list[str]] = []

    def mapper(fn: Any, paths: list[str]) -> list[Any]:
        seen.append(list(paths))
        out = pickle.loads(pickle.dumps(read_files(fn, os.getcwd(), paths)))  # as a Ray task returns it
        return [r.error() if hasattr(r, "error") else r for r in out]

    plain = load_documents([str(root)])
    mapped = load_documents([str(root)], mapper=mapper)
    assert seen and sorted(seen[0]) == sorted(d.path for d in plain)
    assert [d.model_dump() for d in mapped] == [d.model_dump() for d in plain]
    assert [s.document.path for s in load_sources([str(root)], mapper=mapper)] == [d.path for d in plain]


def test_bad_files_read_by_a_mapper_are_reported_as_without_it(tmp_path: Path) -> None:
    from knowtree.distributed import read_files

    root = _corpus(tmp_path)
    (root / "empty.md").write_text("")
    (root / "bin.txt").write_bytes(b"\x00\x01\x02" * 100)

    def mapper(fn: Any, paths: list[str]) -> list[Any]:
        out = pickle.loads(pickle.dumps(read_files(fn, os.getcwd(), paths)))
        return [r.error() if hasattr(r, "error") else r for r in out]

    with pytest.raises(BadFilesError) as plain:
        load_documents([str(root)])
    with pytest.raises(BadFilesError) as mapped:
        load_documents([str(root)], mapper=mapper)
    assert str(mapped.value) == str(plain.value)
    skipped: list[Any] = []
    good = load_documents([str(root)], mapper=mapper, skip_bad=True, skipped=skipped)
    assert len(good) == 5 and len(skipped) == 2
    assert all(isinstance(e, InputError) for e in [mapped.value])
