"""ChatIndex-style JSON (VectifyAI/ChatIndex's `CTree.save`): export a conversation memory.

Format: `{"max_children", "total_messages", "tree": topic}` where a topic is
`{"type": "topic", "topic_name", "summary", "start_index", "end_index", "sub_node_count",
"children": [...]}` (message indexes 0-based, end exclusive) and a message node is
`{"type": "message", "message_index", "user"?, "assistant"?, "system"?, "sub_node_count": 0}`: an
exchange (a user message and the assistant's reply that follows it) or a lone message. knowtree
adds `"speaker"`, `"timestamp"` and `"position"` (1-based) where it knows them; every message is
exported whole, once.

For a faithful round trip (`import_memory`) knowtree also adds, ignored by other readers: per
message node `"records"`, each message's stored fields but its content (position, role, name,
timestamp, session, source id, attachment), and per topic `"meta"`, the metadata ChatIndex has no
field for (time range, content types, speakers...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from knowtree.construct.conversation import message_leaf
from knowtree.construct.topic_calls import SESSION, TOPIC
from knowtree.errors import InputError
from knowtree.ingest.chat import ChatMessage, parse_messages
from knowtree.types import Node, NodeKind, NodeMeta, Span, content_hash

_ROLE_KEYS = {"user": "user", "assistant": "assistant", "system": "system"}
_RECORD = ("position", "role", "name", "timestamp", "session", "source_id", "attachment")


def export_memory(
    nodes: dict[str, Node],
    root_id: str,
    messages: list[dict[str, object]],
    *,
    max_children: int,
) -> dict[str, Any]:
    """The memory as ChatIndex JSON. `messages`: the memory's stored rows (position, role, name,
    content, timestamp, node_id...)."""
    by_position = {int(m["position"]): m for m in messages}  # type: ignore[call-overload]
    by_node: dict[str, list[int]] = {}
    for pos, m in sorted(by_position.items()):
        by_node.setdefault(str(m["node_id"]), []).append(pos)
    exported: set[int] = set()

    def leaf_positions(n: Node) -> list[int]:
        found = by_node.get(n.id) or [s.line_start for s in n.spans[:1]]
        return [p for p in found if p in by_position]

    def positions(nid: str) -> list[int]:
        n = nodes[nid]
        if n.is_leaf:
            return leaf_positions(n)
        return [p for c in n.children if c in nodes for p in positions(c)]

    def message_nodes(pos_list: list[int]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for pos in pos_list:
            if pos in exported:
                continue
            exported.add(pos)
            m = by_position[pos]
            role = str(m["role"])
            key = _ROLE_KEYS.get(role, "user")
            prev = out[-1] if out else None
            if prev is not None and key == "assistant" and "user" in prev and "assistant" not in prev:
                prev["assistant"] = m["content"]  # the reply joins its question: one exchange
                prev["records"].append(_record(m))
                continue
            node: dict[str, Any] = {
                "type": "message",
                "message_index": pos - 1,
                "position": pos,
                key: m["content"],
            }
            if m.get("name"):
                node["speaker"] = m["name"]
            if m.get("timestamp"):
                node["timestamp"] = m["timestamp"]
            node["sub_node_count"] = 0
            node["records"] = [_record(m)]
            out.append(node)
        return out

    def topic(nid: str, name: str | None = None) -> dict[str, Any]:
        n = nodes[nid]
        children: list[dict[str, Any]] = []
        pending: list[int] = []
        for c in n.children:
            if c not in nodes:
                continue
            if nodes[c].is_leaf:
                pending += leaf_positions(nodes[c])
                continue
            children += message_nodes(pending)
            pending = []
            children.append(topic(c))
        children += message_nodes(pending)
        span = positions(nid)
        return {
            "type": "topic",
            "topic_name": name or n.meta.title or _short(n.meta.summary),
            "summary": n.meta.summary,
            "start_index": min(span) - 1 if span else 0,
            "end_index": max(span) if span else 0,
            "sub_node_count": len(children),
            "children": children,
            **_meta_extra(n),
        }

    root = topic(root_id, "ROOT")
    missing = sorted(set(by_position) - exported)
    if missing:  # messages no leaf points at (should not happen): exported anyway, never dropped
        root["children"] += message_nodes(missing)
        root["sub_node_count"] = len(root["children"])
    return {"max_children": max_children, "total_messages": len(by_position), "tree": root}


def _short(summary: str, words: int = 6) -> str:
    return " ".join(summary.split()[:words]) or "topic"


def _record(m: dict[str, object]) -> dict[str, object]:
    return {k: m[k] for k in _RECORD if m.get(k) is not None}


def _meta_extra(n: Node) -> dict[str, Any]:
    meta = n.meta.model_dump(exclude={"title", "summary"}, exclude_defaults=True)
    return {"meta": meta} if meta else {}


# -- import --------------------------------------------------------------------------------------------
def is_chatindex(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("tree"), dict) and data["tree"].get("type") == "topic"


@dataclass
class ImportedMemory:
    """A memory read from ChatIndex JSON, as `SQLiteStore.save_memory_step` takes it."""

    root_id: str
    nodes: list[Node]
    parents: dict[str, str]
    messages: list[dict[str, object]]
    state: dict[str, Any]
    max_children: int
    topics: int = 0
    last: ChatMessage | None = field(default=None, repr=False)


@dataclass
class _Topic:
    meta: NodeMeta
    kind: str  # root, session, topic
    children: list[_Topic | tuple[int, ChatMessage]] = field(default_factory=list)

    def positions(self) -> list[int]:
        return [p for c in self.children for p in (c.positions() if isinstance(c, _Topic) else [c[0]])]


class _Reader:
    """Reads the JSON in order (positions given out as messages come), then makes the nodes top
    down (a topic's id, as the memory makes it, depends on its parent's)."""

    def __init__(self, name: str, source: str) -> None:
        self.name, self.source = name, source
        self.nodes: dict[str, Node] = {}
        self.parents: dict[str, str] = {}
        self.rows: list[dict[str, object]] = []
        self.position = 0
        self.topics = 0
        self.last: ChatMessage | None = None

    def fail(self, where: str, why: str) -> InputError:
        return InputError(self.source, f"{where}: {why}")

    def messages_of(self, item: dict[str, Any], where: str) -> list[tuple[int, ChatMessage]]:
        """The messages of one message node: (position, message), in order."""
        records = item.get("records")
        if isinstance(records, list) and records and all(isinstance(r, dict) for r in records):
            # knowtree's own export: every field kept; an exchange's reply is under "assistant"
            keys = ["user", "assistant"] if len(records) == 2 else [_ROLE_KEYS.get(str(records[0].get("role")), "user")]
            raw = [{**r, "content": item.get(k)} for r, k in zip(records, keys, strict=False)]
        else:  # plain ChatIndex: system, user, then assistant, as the node holds them
            raw = [
                {"role": k, "content": item[k], "timestamp": item.get("timestamp"),
                 "name": item.get("speaker") if k == "user" else None}
                for k in ("system", "user", "assistant") if k in item
            ]  # fmt: skip
        if not raw:
            raise self.fail(where, "a message node without a message (no user, assistant or system text)")
        for r in raw:
            if not isinstance(r.get("content"), str):
                raise self.fail(where, "a message's text must be a string")
            if "source_id" in r:
                r["id"] = r.pop("source_id")
        parsed = parse_messages([{k: v for k, v in r.items() if k != "position"} for r in raw], self.source)
        out = []
        for r, m in zip(raw, parsed, strict=True):
            pos = r.get("position")
            # the positions given are kept while they keep the order (a memory's deleted messages leave
            # gaps); otherwise (plain ChatIndex indexes count exchanges) each message takes the next one
            ok = isinstance(pos, int) and not isinstance(pos, bool) and pos > self.position
            self.position = pos if ok else self.position + 1  # type: ignore[assignment]
            out.append((self.position, m))
        return out

    def read(self, item: Any, where: str, *, root: bool) -> _Topic:
        if not isinstance(item, dict) or item.get("type") != "topic":
            raise self.fail(where, "expected a topic or message object")
        children = item.get("children") or []
        if not isinstance(children, list):
            raise self.fail(where, "'children' must be a list")
        extra = item.get("meta") if isinstance(item.get("meta"), dict) else {}
        title = self.name if root else " ".join(str(item.get("topic_name") or "topic").split())
        try:
            meta = NodeMeta.model_validate(
                {"content_types": ["Conversation" if root else TOPIC], **extra,
                 "title": title, "summary": str(item.get("summary") or "")}
            )  # fmt: skip
        except ValueError as exc:
            raise self.fail(where, f"bad 'meta' ({' '.join(str(exc).split())[:160]})") from None
        topic = _Topic(meta, "root" if root else ("session" if SESSION in meta.content_types else "topic"))
        for i, child in enumerate(children):
            at = f"{where} > child {i + 1}"
            if isinstance(child, dict) and child.get("type") == "message":
                topic.children.extend(self.messages_of(child, at))
            else:
                topic.children.append(self.read(child, at, root=False))
        return topic

    def make(self, topic: _Topic, parent: str | None) -> Node:
        positions = topic.positions()
        first, last = (min(positions), max(positions)) if positions else (1, 0)
        if parent is None:
            node_id = content_hash("root", self.name)
        else:  # as the memory makes a topic's id: from its message range and its parent
            node_id = content_hash(topic.kind, self.name, str(first), str(last), parent)
            self.parents[node_id] = parent
            self.topics += 1
        kids: list[Node] = []
        for child in topic.children:
            if isinstance(child, _Topic):
                kids.append(self.make(child, node_id))
                continue
            leaf, row = message_leaf(self.name, *child)
            self.nodes[leaf.id] = leaf
            self.parents[leaf.id] = node_id
            self.rows.append(row)
            self.last = child[1]
            kids.append(leaf)
        times = [t for k in kids for t in k.meta.time_range]
        if times and not topic.meta.time_range:
            topic.meta.time_range = [min(times), max(times)]
        node = Node(
            id=node_id,
            kind=NodeKind.ROOT if parent is None else NodeKind.BRANCH,
            level=1 + max((k.level for k in kids), default=0),
            meta=topic.meta,
            children=[k.id for k in kids],
            spans=[Span(file=self.name, start=first, end=last + 1, line_start=first, line_end=last)],
        )
        self.nodes[node_id] = node
        return node


def import_memory(data: Any, source: str, name: str, *, max_children: int) -> ImportedMemory:
    """A conversation memory named `name` from ChatIndex JSON (as `export_memory` writes it, or
    VectifyAI/ChatIndex's own): messages verbatim in order, the topic tree as it is. Bad input
    raises `InputError` naming the file and the place in the tree."""
    if not is_chatindex(data):
        raise InputError(source, "not ChatIndex JSON (expected a 'tree' topic object)")
    reader = _Reader(name, source)
    root_id = reader.make(reader.read(data["tree"], "tree", root=True), None).id
    if not reader.rows:
        raise InputError(source, "ChatIndex JSON without a message")
    nodes = reader.nodes
    path = [root_id]
    while nodes[path[-1]].children and not nodes[nodes[path[-1]].children[-1]].is_leaf:
        path.append(nodes[path[-1]].children[-1])  # adds continue at the latest topic
    count = max(int(r["position"]) for r in reader.rows)  # type: ignore[call-overload]
    state = {
        "path": path,
        "dirty": [],
        "messages": count,
        "deleted": count - len(reader.rows),
        "last": reader.last.model_dump() if reader.last else None,
    }
    given = data.get("max_children")
    return ImportedMemory(
        root_id=root_id,
        nodes=list(nodes.values()),
        parents=dict(reader.parents),
        messages=reader.rows,
        state=state,
        max_children=given if isinstance(given, int) and given >= 2 else max_children,
        topics=reader.topics,
        last=reader.last,
    )
