"""ChatIndex-style JSON (VectifyAI/ChatIndex's `CTree.save`): export a conversation memory.

Format: `{"max_children", "total_messages", "tree": topic}` where a topic is
`{"type": "topic", "topic_name", "summary", "start_index", "end_index", "sub_node_count",
"children": [...]}` (message indexes 0-based, end exclusive) and a message node is
`{"type": "message", "message_index", "user"?, "assistant"?, "system"?, "sub_node_count": 0}`: an
exchange (a user message and the assistant's reply that follows it) or a lone message. knowtree
adds `"speaker"`, `"timestamp"` and `"position"` (1-based) where it knows them; every message is
exported whole, once.
"""

from __future__ import annotations

from typing import Any

from knowtree.types import Node

_ROLE_KEYS = {"user": "user", "assistant": "assistant", "system": "system"}


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
        }

    root = topic(root_id, "ROOT")
    missing = sorted(set(by_position) - exported)
    if missing:  # messages no leaf points at (should not happen): exported anyway, never dropped
        root["children"] += message_nodes(missing)
        root["sub_node_count"] = len(root["children"])
    return {"max_children": max_children, "total_messages": len(by_position), "tree": root}


def _short(summary: str, words: int = 6) -> str:
    return " ".join(summary.split()[:words]) or "topic"
