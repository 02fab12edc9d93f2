"""Property-based tests (hypothesis) of everything that reads outside input (issue 13).

* Ingest parsers: arbitrary bytes and mangled text / Markdown / HTML / DOCX files.
* The chat importer: JSONL and JSON files of generated records (roles, contents, timestamps at and
  past the date limits, ids, sessions, junk lines).
* Model-reply validation: replies generated from each reply schema (the pydantic model's own JSON
  schema) and around it: valid, a required field missing, a wrong type, extra junk, truncated JSON,
  code fences, prose.

Properties: no uncaught exception; every failure is a typed `KnowtreeError` naming the file (and the
record) or the call; a rejected input leaves the database exactly as it was.

Examples are capped so the whole file runs in well under a minute; under CI (`CI` set) the examples
are derandomized, so a run is reproducible.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import string
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from knowtree.answer.replies import ANSWER_SCHEMA
from knowtree.answer.replies import Choice as _Choice
from knowtree.answer.replies import MemoryReply as _Reply
from knowtree.answer.search import SearchReply, SourceAnswer
from knowtree.construct.metadata import BRANCH_SCHEMA, LEAF_SCHEMA, BranchReply, LeafReply
from knowtree.construct.topic_calls import MERGE_SCHEMA, MergeReply, TopicReply, topic_schema
from knowtree.core import KnowTree
from knowtree.errors import InputError, KnowtreeError, ModelOutputError
from knowtree.ingest.chat import ROLES, load_chat
from knowtree.ingest.sources import load_sources
from knowtree.llm.base import Message
from knowtree.llm.client import LLMClient
from knowtree.testing.models import FunctionModel, KeywordModel


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=bool(os.environ.get("CI")),
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


def snapshot(db: Path) -> str:
    """Everything a user stored: trees, documents, nodes, messages (the cache and ledger aside)."""
    c = sqlite3.connect(db)
    try:
        h = hashlib.sha256()
        for table, order in (
            ("trees", "name"),
            ("documents", "tree, path"),
            ("nodes", "tree, id"),
            ("messages", "tree, position"),
        ):
            for row in c.execute(f"SELECT * FROM {table} ORDER BY {order}"):
                h.update(repr(row).encode())
        return h.hexdigest()
    finally:
        c.close()


# -- ingest ----------------------------------------------------------------------------------------
TEXTS = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=400)
ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1", "cp1252"]


@st.composite
def text_bytes(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["encoded", "markdown", "html", "raw"]))
    if kind == "raw":
        return draw(st.binary(max_size=600))
    body = draw(TEXTS)
    if kind == "markdown":
        heads = draw(st.lists(st.tuples(st.integers(1, 6), TEXTS), max_size=4))
        body = "".join(f"{'#' * n} {title}\n\n{body}\n\n" for n, title in heads) or body
    elif kind == "html":
        tags = draw(
            st.lists(st.sampled_from(["h1", "h2", "p", "li", "script", "div", "table", "td"]), max_size=5)
        )
        body = (
            "<html><body>"
            + "".join(f"<{t}>{body}</{t}>" for t in tags)
            + draw(st.sampled_from(["", "<p", "</"]))
        )
    codec = draw(st.sampled_from(ENCODINGS))
    data = body.encode(codec, errors="replace")
    cut = draw(st.integers(0, len(data)))
    return data[:cut] if draw(st.booleans()) else data


def _docx_bytes() -> bytes:
    docx = pytest.importorskip("docx")
    d = docx.Document()
    d.add_heading("Warranty", level=1)
    d.add_paragraph("The warranty lasts five years.")
    d.add_heading("Cleaning", level=2)
    d.add_paragraph("Wipe with a dry cloth.")
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


@st.composite
def docx_bytes(draw: st.DrawFn, valid: bytes) -> bytes:
    data = bytearray(valid)
    for _ in range(draw(st.integers(0, 6))):
        i = draw(st.integers(0, len(data) - 1))
        data[i] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return bytes(data)


def check_load(path: Path, *, headings: bool) -> None:
    try:
        docs = load_sources([str(path)], headings=headings)
    except InputError as exc:
        assert exc.path == str(path) and exc.reason  # names the file and why
        return
    assert len(docs) == 1 and docs[0].document.path == str(path)


@fuzz(120)
@given(data=text_bytes(), suffix=st.sampled_from([".txt", ".md", ".html"]), headings=st.booleans())
def test_fuzz_text_markdown_html_files_load_or_fail_naming_the_file(
    data: bytes, suffix: str, headings: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"input{suffix}"
        path.write_bytes(data)
        check_load(path, headings=headings)


@fuzz(40)
@given(
    text=st.text(alphabet=string.ascii_letters + string.digits + " .,;:!?'\n" + "éèàüöñç", max_size=300),
    codec=st.sampled_from(["utf-16-le", "utf-16-be"]),
)
def test_fuzz_utf16_without_a_byte_order_mark_reads_as_text(text: str, codec: str) -> None:
    assume(len(text.strip()) >= 4)  # two bytes of UTF-16 are not enough to tell it from binary
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "notes.txt"
        path.write_bytes(text.encode(codec))
        [doc] = load_sources([str(path)])
        assert doc.document.text == text


@fuzz(25)
@given(data=st.data())
def test_fuzz_docx_files_load_or_fail_naming_the_file(data: st.DataObject) -> None:
    raw = data.draw(docx_bytes(_docx_bytes()))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "input.docx"
        path.write_bytes(raw)
        check_load(path, headings=False)


@pytest.mark.sqlite_only
@fuzz(25)
@given(data=text_bytes())
def test_fuzz_a_rejected_file_leaves_the_database_unchanged(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        good = Path(tmp) / "good.md"
        good.write_text("# Notes\nThe lighthouse keeper logs the weather.\n")
        db = Path(tmp) / "kb.db"
        with KnowTree(db, model=KeywordModel()) as kt:
            kt.build([str(good)], tree="t")
            bad = Path(tmp) / "other.txt"
            bad.write_bytes(data)
            before = snapshot(db)
            try:
                kt.build([str(good), str(bad)], tree="t")
            except InputError as exc:
                assert str(bad) in str(exc)
                assert snapshot(db) == before


# -- the chat importer -------------------------------------------------------------------------------
LIMITS = st.sampled_from(
    [
        "9999-12-31T23:00:00-05:00",
        "0001-01-01T00:00:00+14:00",
        "9999-12-31T23:59:59",
        "0001-01-01",
        "99999999999",
    ]
)
# datetimes anywhere in the calendar, in any time zone (near the limits a UTC conversion overflows)
ANY_TIME = st.datetimes(timezones=st.one_of(st.none(), st.timezones())).map(lambda d: d.isoformat())
TIMESTAMPS = st.one_of(
    ANY_TIME,
    LIMITS,
    st.none(),
    st.sampled_from(
        ["1:56 pm on 8 May, 2023", "8 May 2023", "yesterday", "", "13:61 pm on 31 February, 2023"]
    ),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    TEXTS,
)
# mostly well-formed records (so later fields and later records are reached), sometimes not
ROLE = st.one_of(
    st.sampled_from(ROLES), st.sampled_from(ROLES), st.sampled_from(ROLES), TEXTS, st.none(), st.integers()
)
CONTENT = st.one_of(
    TEXTS,
    TEXTS,
    st.lists(st.one_of(TEXTS, st.fixed_dictionaries({"text": TEXTS}), st.integers()), max_size=3),
    st.none(),
    st.integers(),
)
RECORDS = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(ROLES), "content": TEXTS, "timestamp": TIMESTAMPS}),
    st.fixed_dictionaries(
        {
            "role": ROLE,
            "content": CONTENT,
        },
        optional={
            "name": st.one_of(TEXTS, st.none(), st.integers()),
            "timestamp": TIMESTAMPS,
            "session": st.one_of(TEXTS, st.integers(), st.none()),
            "id": st.one_of(TEXTS, st.integers()),
            "attachment": st.one_of(TEXTS, st.integers()),
        },
    ),
    st.sampled_from([[], 3, "text", None, {"messages": 1}]),
)


@fuzz(60)
@given(stamp=st.one_of(ANY_TIME, LIMITS))
def test_fuzz_any_calendar_time_is_a_message_time_or_a_named_record_error(stamp: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "chat.jsonl"
        path.write_text(json.dumps({"role": "user", "content": "hi", "timestamp": stamp}) + "\n")
        try:
            [message] = load_chat(path)
        except InputError as exc:
            assert exc.path == str(path) and "line 1" in exc.reason and "timestamp" in exc.reason
        else:
            assert message.time is not None


@st.composite
def chat_file(draw: st.DrawFn) -> tuple[str, str]:
    records = draw(st.lists(RECORDS, min_size=0, max_size=6))
    shape = draw(st.sampled_from(["jsonl", "json", "wrapped", "junk-line"]))
    if shape == "json":
        return ".json", json.dumps(records)
    if shape == "wrapped":
        return ".json", json.dumps({"messages": records})
    lines = [json.dumps(r) for r in records]
    if shape == "junk-line" and lines:
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(["{", "not json", "[1,", "{}"])))
    return ".jsonl", "\n".join(lines)


@fuzz(150)
@given(case=chat_file())
def test_fuzz_chat_files_load_or_fail_naming_the_file_and_record(case: tuple[str, str]) -> None:
    suffix, text = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"chat{suffix}"
        path.write_text(text, encoding="utf-8")
        try:
            messages = load_chat(path)
        except InputError as exc:
            assert exc.path == str(path) and exc.reason
            return
        assert messages and all(m.role in ROLES and isinstance(m.content, str) for m in messages)


@pytest.mark.sqlite_only
@fuzz(30)
@given(case=chat_file())
def test_fuzz_a_rejected_chat_leaves_the_memory_unchanged(case: tuple[str, str]) -> None:
    suffix, text = case
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "kb.db"
        good = Path(tmp) / "good.jsonl"
        good.write_text(json.dumps({"role": "user", "name": "Ann", "content": "I moved to Lisbon."}) + "\n")
        path = Path(tmp) / f"chat{suffix}"
        path.write_text(text, encoding="utf-8")
        with KnowTree(db, model=KeywordModel()) as kt:
            mem = kt.memory("m")
            mem.embedder = None
            mem.add_file(good)
            before = snapshot(db)
            try:
                mem.add_file(path)
            except InputError as exc:
                assert exc.path == str(path)
                assert snapshot(db) == before


# -- model replies -------------------------------------------------------------------------------
def instances(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> st.SearchStrategy[Any]:
    """Values valid under a (pydantic-generated or hand-written) JSON schema: the subset these reply
    schemas use (object, array, string, integer, boolean, null, enum, anyOf, $ref)."""
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        return instances(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([instances(s, defs) for s in schema["anyOf"]])
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", props))
        return st.fixed_dictionaries(
            {k: instances(v, defs) for k, v in props.items() if k in required},
            optional={k: instances(v, defs) for k, v in props.items() if k not in required},
        )
    if kind == "array":
        return st.lists(
            instances(schema.get("items", {"type": "string"}), defs), max_size=schema.get("maxItems", 4)
        )
    if kind == "string":
        return st.text(
            string.ascii_letters + " .,'", min_size=1, max_size=min(schema.get("maxLength", 60), 60)
        )
    if kind == "integer":
        return st.integers(0, 9)
    if kind == "boolean":
        return st.booleans()
    return st.none()


REPLIES: dict[str, tuple[type[BaseModel], dict[str, Any]]] = {
    "search": (SearchReply, SearchReply.model_json_schema()),
    "search_answer": (SourceAnswer, SourceAnswer.model_json_schema()),
    "memory_choose": (_Choice, _Choice.model_json_schema()),
    "memory_answer": (_Reply, ANSWER_SCHEMA),
    "topic": (TopicReply, topic_schema(3)),
    "topic_merge": (MergeReply, MERGE_SCHEMA),
    "leaf_meta": (LeafReply, LEAF_SCHEMA),
    "branch_meta": (BranchReply, BRANCH_SCHEMA),
}
#: fields that must hold real integers / booleans (no `true` for 1, no "yes" for true)
STRICT = {
    "search": ["node_list"],
    "search_answer": ["found", "source"],
    "memory_choose": ["choice"],
    "memory_answer": ["found"],
    "topic": ["choice"],
}


@st.composite
def reply_case(draw: st.DrawFn) -> tuple[str, str, str, dict[str, Any]]:
    purpose = draw(st.sampled_from(sorted(REPLIES)))
    _model, schema = REPLIES[purpose]
    value = draw(instances(schema))
    mutation = draw(
        st.sampled_from(
            ["valid", "missing", "wrong-type", "loose-type", "junk", "truncated", "fenced", "prose", "noise"]
        )
    )
    required = [k for k in schema.get("required", []) if k in value]
    if mutation == "missing" and required:
        value.pop(draw(st.sampled_from(required)))
    elif mutation == "loose-type" and purpose in STRICT:
        # what lax parsing would coerce: true for 1, 1 for true, "2" for 2
        key = draw(st.sampled_from(STRICT[purpose]))
        loose: Any = (
            draw(st.sampled_from([True, "2", 1.0])) if key != "found" else draw(st.sampled_from([1, "true"]))
        )
        value[key] = [loose] if key == "node_list" else loose
    elif mutation == "wrong-type" and value:
        key = draw(st.sampled_from(sorted(value)))
        value[key] = draw(st.sampled_from([True, "yes", None, {"a": 1}, 3.5, [None]]))
    elif mutation == "junk":
        value[draw(st.text(string.ascii_letters, min_size=1, max_size=8))] = draw(TEXTS)
    text = json.dumps(value)
    if mutation == "truncated":
        text = text[: draw(st.integers(0, len(text) - 1))]
    elif mutation == "fenced":
        text = f"```json\n{text}\n```"
    elif mutation == "prose":
        text = f"Sure! Here is the JSON you asked for: {text} Hope it helps."
    elif mutation == "noise":
        text = draw(TEXTS)
    return purpose, mutation, text, value


@fuzz(200)
@given(case=reply_case())
def test_fuzz_replies_validate_or_raise_a_typed_error_naming_the_call(
    case: tuple[str, str, str, dict],
) -> None:
    purpose, mutation, text, value = case
    model, schema = REPLIES[purpose]
    client = LLMClient(FunctionModel(lambda r: text, id="fuzz"))
    try:
        result = client.structured([Message(role="user", content="q")], model, schema=schema, purpose=purpose)
    except ModelOutputError as exc:
        assert isinstance(exc, KnowtreeError) and purpose in str(exc) and exc.attempts == 3
        accepted = None
    else:
        accepted = result.value
        assert isinstance(accepted, model)
    if mutation in ("valid", "fenced", "prose", "junk"):
        try:
            expected: BaseModel | None = model.model_validate(value)
        except ValueError:
            expected = None
        if expected is not None:
            assert accepted is not None  # a reply valid under its schema is accepted
    if mutation == "missing" and accepted is not None:
        # a reply missing a field is accepted only when that field is optional in the model, and the
        # fields a decision rests on are never optional (a garbled reply is not "select nothing")
        missing = [k for k in schema.get("required", []) if k not in value]
        assert all(not model.model_fields[k].is_required() for k in missing if k in model.model_fields)
        assert not set(missing) & set(STRICT.get(purpose, [])), missing
    if mutation == "loose-type" and purpose in STRICT:
        assert accepted is None, f"{purpose}: a loosely typed reply was accepted: {text}"


@fuzz(25)
@given(
    text=st.one_of(
        TEXTS,
        instances(ANSWER_SCHEMA).map(json.dumps),  # well-formed answers citing any message numbers
        instances(_Choice.model_json_schema()).map(json.dumps),
        st.builds(
            json.dumps, st.dictionaries(TEXTS, st.one_of(TEXTS, st.integers(), st.booleans()), max_size=4)
        ),
    )
)
def test_fuzz_a_memory_answers_or_records_errors_whatever_the_model_says(text: str) -> None:
    """End to end: a model that only ever says `text` never crashes a memory's walk."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "kb.db"
        msgs = [
            {
                "role": "user",
                "name": "Ann",
                "content": f"Message {i}: I moved to Lisbon and adopted a cat named Tom.",
            }
            for i in range(12)
        ]
        with KnowTree(db, model=KeywordModel()) as kt:
            mem = kt.memory("m")
            mem.embedder = None
            mem.add(msgs)
        seq = hashlib.sha256(text.encode()).hexdigest()[:8]  # its own cache: no earlier example's reply
        with KnowTree(db, model=FunctionModel(lambda r: text, id=f"fuzz-{seq}")) as kt:
            mem = kt.memory("m")
            mem.embedder = None
            try:
                answer = mem.ask("Where did Ann move?")
            except KnowtreeError:
                return
        if answer.status != "none":
            assert answer.citations  # an answer always cites a message
        else:
            assert answer.answer is None
