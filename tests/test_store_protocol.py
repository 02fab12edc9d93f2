"""The store interface (store/protocol.py): one contract, run against SQLiteStore(":memory:"),
PostgresStore (a fresh database on the session's PostgreSQL) and the dict-based InMemoryStore, so the fake behaves like the real store wherever `Store` is used."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Iterator

import pytest

from conftest import open_test_store
from knowtree.errors import NotFoundError, StoreError
from knowtree.llm.base import Completion
from knowtree.store import PostgresStore, SQLiteStore
from knowtree.store.inmemory import InMemoryStore
from knowtree.store.protocol import SQLStore, Store
from knowtree.types import Document, Node, NodeKind, NodeMeta, Span, Usage


def _doc(path: str, text: str) -> Document:
    return Document(path=path, text=text, sha256=hashlib.sha256(text.encode()).hexdigest())


def _tree(prefix: str = "t", word: str = "quarterly") -> tuple[str, list[Node], list[Document]]:
    a_text = f"The {word} report was filed on Monday."
    b_text = "The safety review happened on Friday."
    a = Node(
        id=f"{prefix}-a",
        kind=NodeKind.LEAF,
        level=0,
        meta=NodeMeta(summary=f"About the {word} report.", decisions=["report monthly"]),
        text=a_text,
        spans=[Span(file="a.md", start=0, end=len(a_text), line_start=1, line_end=1)],
    )
    b = Node(
        id=f"{prefix}-b",
        kind=NodeKind.LEAF,
        level=0,
        meta=NodeMeta(summary="About the review."),
        text=b_text,
        spans=[Span(file="b.md", start=0, end=len(b_text), line_start=1, line_end=2)],
    )
    root = Node(
        id=f"{prefix}-root",
        kind=NodeKind.ROOT,
        level=1,
        meta=NodeMeta(summary="Reports and reviews."),
        children=[a.id, b.id],
        spans=[*a.spans, *b.spans],
    )
    return root.id, [a, b, root], [_doc("a.md", a_text), _doc("b.md", b_text)]


def _save(store: Store, name: str = "t", word: str = "quarterly", **kw: object) -> list[Node]:
    root, nodes, docs = _tree(name, word)
    store.save_tree(name, root_id=root, nodes=nodes, documents=docs, model="m1", settings={"k": 1}, **kw)  # type: ignore[arg-type]
    return nodes


@pytest.fixture(params=["sqlite", "postgresql", "memory"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    s: Store = InMemoryStore() if request.param == "memory" else open_test_store(request.param, request)
    yield s
    s.close()


# -- the interface itself ----------------------------------------------------------------------------
def test_both_stores_implement_the_protocol_with_the_same_signatures() -> None:
    sqlite_store, fake = SQLiteStore(":memory:"), InMemoryStore()
    assert isinstance(sqlite_store, SQLStore) and isinstance(fake, Store)
    assert not isinstance(fake, SQLStore)  # no SQL: modules owning tables need SQLiteStore
    members = [m for m in dir(SQLStore) if not m.startswith("_") and callable(getattr(SQLStore, m))]
    assert {"save_tree", "load_nodes", "start_run", "query", "transaction", "on_save_tree"} <= set(members)
    for name in members:
        want = inspect.signature(getattr(SQLStore, name))
        assert inspect.signature(getattr(SQLiteStore, name)).parameters.keys() == want.parameters.keys(), name
        assert inspect.signature(getattr(PostgresStore, name)).parameters.keys() == want.parameters.keys(), name
        if hasattr(Store, name) and name in Store.__dict__:
            assert (
                inspect.signature(getattr(InMemoryStore, name)).parameters.keys() == want.parameters.keys()
            ), name


# -- trees -------------------------------------------------------------------------------------------
def test_tree_round_trip_and_info(store: Store) -> None:
    nodes = _save(store)
    assert store.tree_exists("t") and not store.tree_exists("u")
    assert store.load_nodes("t") == {n.id: n for n in nodes}
    assert store.root_id("t") == "t-root"
    assert [d.path for d in store.documents("t")] == ["a.md", "b.md"]
    assert store.documents("missing") == []
    assert store.tree_settings("t") == {"k": 1}
    info = store.tree_info("t")
    assert (info.documents, info.nodes, info.leaves, info.depth, info.model, info.kind) == (
        2,
        3,
        2,
        1,
        "m1",
        "document",
    )


def test_replacing_a_tree_keeps_its_creation_time(store: Store) -> None:
    _save(store)
    created = store.tree_info("t").created
    _save(store, word="annual", kind="collection")
    info = store.tree_info("t")
    assert info.created == created and info.kind == "collection"
    assert "annual" in store.load_nodes("t")["t-a"].text


def test_missing_trees_raise_and_name_the_known_trees(store: Store) -> None:
    assert "none yet" in store.missing_message("x")
    _save(store, "beta")
    _save(store, "alpha")
    assert store.tree_names() == ["alpha", "beta"]
    for call in (store.load_nodes, store.tree_info, store.root_id, store.tree_settings):
        with pytest.raises(NotFoundError, match="alpha, beta"):
            call("x")
    with pytest.raises(NotFoundError):
        store.delete_tree("x")
    store.delete_tree("alpha")
    assert store.tree_names() == ["beta"]


def test_search_nodes_over_text_and_metadata(store: Store) -> None:
    _save(store)
    assert store.search_nodes("t", "Friday")[0][0] == "t-b"  # in leaf b's text only
    assert {h[0] for h in store.search_nodes("t", "monthly")} == {"t-a"}  # a decision
    assert store.search_nodes("t", "") == [] and store.search_nodes("t", "?! -") == []
    assert store.search_nodes("missing", "Friday") == []
    assert all(score > 0 for _, score in store.search_nodes("t", "report review"))


def test_update_node_meta_is_loaded_and_searched(store: Store) -> None:
    nodes = _save(store)
    store.update_node_meta("t", nodes[1], NodeMeta(summary="Lighthouse inspection."))
    assert store.load_nodes("t")["t-b"].meta.summary == "Lighthouse inspection."
    assert [h[0] for h in store.search_nodes("t", "lighthouse")] == ["t-b"]


def test_update_node_meta_marks_the_tree_changed_every_time_even_within_a_second(store: Store) -> None:
    nodes = _save(store)
    seen = [store.tree_info("t").updated]
    for i in range(3):  # in a row, well within one second: each write is a new `updated`
        store.update_node_meta("t", nodes[0], NodeMeta(summary=f"Version {i}."))
        seen.append(store.tree_info("t").updated)
    assert len(set(seen)) == 4
    assert seen[1:] == sorted(seen[1:])  # written by `touched`: later and later


def test_hooks_run_with_the_save_and_a_failing_one_keeps_the_previous_version(store: Store) -> None:
    seen: list[tuple[str, str]] = []
    store.on_save_tree(lambda _handle, name: seen.append(("save", name)))
    store.on_delete_tree(lambda _handle, name: seen.append(("delete", name)))
    _save(store)
    store.delete_tree("t")
    assert seen == [("save", "t"), ("delete", "t")]
    _save(store)

    def boom(_handle: object, _name: str) -> None:
        raise RuntimeError("index failed")

    store.on_save_tree(boom)
    with pytest.raises(RuntimeError):
        _save(store, word="annual")
    assert "quarterly" in store.load_nodes("t")["t-a"].text



def test_a_save_hook_gets_the_nodes_just_saved_and_the_rows_say_the_same(store: Store) -> None:
    got: list[tuple[str, list[str]]] = []
    store.on_save_tree(lambda _handle, name, nodes: got.append((name, sorted(n.id for n in nodes))))
    store.on_save_tree(lambda _handle, name, *rest: got.append((name, sorted(n.id for n in rest[0]))))
    nodes = _save(store)
    assert got == [("t", sorted(n.id for n in nodes))] * 2
    assert sorted(store.load_nodes("t")) == got[0][1]


# -- memories ----------------------------------------------------------------------------------------
def _message(position: int, node_id: str) -> dict[str, object]:
    return {"position": position, "role": "user", "content": f"message {position}", "node_id": node_id}


def test_memory_steps_upsert_nodes_and_append_messages(store: Store) -> None:
    root, nodes, _ = _tree("m")
    step = {"model": "m1", "settings": {}, "parents": {"m-a": root, "m-b": root}}
    store.save_memory_step(
        "chat", root_id=root, nodes=nodes, messages=[_message(0, "m-a"), _message(1, "m-b")], **step
    )  # type: ignore[arg-type]
    assert store.tree_info("chat").kind == "conversation"
    store.save_memory_step(
        "chat", root_id=root, nodes=nodes[2:], removed=["m-b"], messages=[_message(2, "m-a")], **step
    )  # type: ignore[arg-type]
    assert set(store.load_nodes("chat")) == {"m-a", "m-root"}
    messages = store.load_messages("chat")
    assert [m["position"] for m in messages] == [0, 1, 2] and messages[0]["name"] is None
    assert [m["content"] for m in store.load_messages("chat", 1, 2)] == ["message 1"]
    assert store.load_messages("nothing") == []
    _save(store, "doc")
    with pytest.raises(StoreError, match="document tree"):
        store.save_memory_step("doc", root_id=root, nodes=[], **step)  # type: ignore[arg-type]


# -- cache, ledger, runs -----------------------------------------------------------------------------
def test_cache_ledger_and_runs(store: Store) -> None:
    done = Completion(text="hi", input_tokens=3, output_tokens=2)
    assert store.cache_get("k") is None
    store.cache_put("k", "m1", done)
    assert store.cache_get("k") == done
    store.cache_delete(["k", "other"])
    assert store.cache_get("k") is None

    first = store.start_run("build", "t", detail="x")
    second = store.start_run("ask", "u")
    usage = Usage(input_tokens=10, output_tokens=5, cost_usd=0.5, seconds=1.0)
    for cached in (False, True):
        store.record_call(
            run_id=first, key="k", model_id="m1", purpose="p", cached=cached, usage=usage, error=None
        )
    store.finish_run(first, "ok")
    total = store.run_usage(first)
    assert (total.calls, total.cached, total.input_tokens, total.output_tokens) == (1, 1, 20, 10)
    assert store.run_usage(second).calls == 0
    runs = store.runs()
    assert [r["id"] for r in runs] == [second, first]
    assert runs[1]["status"] == "ok" and runs[1]["detail"] == "x" and runs[1]["finished"]
    assert runs[0]["status"] == "running"  # this process is alive
    assert [r["id"] for r in store.runs(tree="t")] == [first] and len(store.runs(limit=1)) == 1
    assert runs[1]["usage"] == total.model_dump()  # type: ignore[comparison-overlap]
    # a fresh reply: its cache row and its ledger row in one write
    third = store.start_run("build", "t")
    store.put_reply("k2", "m1", done, run_id=third, purpose="p", usage=usage)
    assert store.cache_get("k2") == done
    fresh = store.run_usage(third)
    assert (fresh.calls, fresh.cached, fresh.input_tokens) == (1, 0, 10)
    store.finish_run(third, "ok")
