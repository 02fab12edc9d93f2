"""Forgetting one message of a conversation memory (`Memory.delete_message`).

Positions are stable: the message's position is never reused (`TopicTree.count` stays the highest
position given out) and no other message moves, so every citation to another message stays valid.
What goes: the message's leaf. What changes:

* the topic it sat under keeps its id and its place; its span is recomputed from the messages left,
  and its name and summary (written by the topic call from its messages) are written again by the
  same "topic" call over the messages left (in code, as a fallback, when that reply stays invalid;
  by position when the memory makes no calls);
* a topic (or session, or group) left with no children goes, and so on up (the root stays);
* every ancestor is marked dirty and re-summarised from its children by `flush` ("topic_merge"
  calls, none for a single child) — the way an `add` refreshes the summaries a new message changed.

`Forgetting` is mixed into `knowtree.construct.conversation.TopicTree`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from knowtree.construct.metadata import cap_summary, merge_ranked
from knowtree.construct.topic_calls import TOPIC
from knowtree.ingest.chat import ChatMessage
from knowtree.text import clip
from knowtree.types import NodeMeta, Usage

if TYPE_CHECKING:
    from knowtree.construct.topic_calls import TopicReply
    from knowtree.llm.client import LLMClient
    from knowtree.types import Node


@dataclass
class DeleteReport:
    memory: str
    position: int
    removed: list[str] = field(default_factory=list)  # node ids gone: the leaf, then emptied branches
    refreshed: list[str] = field(default_factory=list)  # node ids whose summary was written again
    messages: int = 0  # messages the memory holds now
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0

    def line(self) -> str:
        return (
            f"memory {self.memory!r}: message {self.position} deleted; {len(self.removed)} node(s) removed, "
            f"{len(self.refreshed)} summary(ies) refreshed; {self.messages} messages left; "
            f"{self.usage.calls} LLM calls, {self.seconds:.1f}s"
        )


class Forgetting:
    """Mixed into `TopicTree`: remove one message leaf and refresh what described it."""

    name: str
    nodes: dict[str, Node]
    parent: dict[str, str]
    path: list[str]
    dirty: list[str]
    root_id: str | None
    summarize: bool
    last: ChatMessage | None
    deleted: int

    if TYPE_CHECKING:

        def _touch(self, node_id: str, step: Any) -> None: ...
        def _refresh(self, node_id: str) -> None: ...
        def _mark_dirty(self, node_id: str) -> None: ...
        def _fallback_meta(self, batch: Sequence[ChatMessage]) -> NodeMeta: ...
        def flush(self, client: LLMClient, step: Any) -> None: ...
        def _decide(
            self, batch: Sequence[ChatMessage], options: list[tuple[str, str]], client: LLMClient,
            positions: Sequence[int] | None = None,
        ) -> TopicReply | None: ...

    def forget(
        self, leaf_id: str, rows: Sequence[dict[str, object]], client: LLMClient, step: Any
    ) -> list[str]:
        """Remove the leaf `leaf_id`; `rows` are the memory's stored messages left (without it).
        Returns the ids of the nodes whose summaries were written again."""
        step.removed.add(leaf_id)
        parent = self.parent.pop(leaf_id)
        self.nodes.pop(leaf_id)
        self.deleted += 1
        current = parent
        while True:  # emptied branches go, up to (not including) the root
            node = self.nodes[current]
            node.children = [c for c in node.children if c != leaf_id and c in self.nodes]
            if node.children or current == self.root_id:
                break
            up = self.parent.pop(current)
            self.nodes.pop(current)
            step.removed.add(current)
            step.changed.pop(current, None)
            if current in self.dirty:
                self.dirty.remove(current)
            leaf_id, current = current, up
        if any(n in step.removed for n in self.path):  # the current path ends above what went
            self.path = self.path[: next(i for i, n in enumerate(self.path) if n in step.removed)]
        root = self.nodes[current]
        if current == self.root_id and not root.children:  # nothing left: the root describes nothing
            root.meta = NodeMeta(title=root.meta.title, content_types=root.meta.content_types)
            root.level = 1
            refreshed_root = [current]
        else:
            refreshed_root = []
        by_node = {str(r["node_id"]): r for r in rows}
        refreshed: list[str] = list(refreshed_root)
        node = self.nodes[current]
        if node.children and self.nodes[node.children[0]].is_leaf and current != self.root_id:
            self._retell(current, [by_node[c] for c in node.children if c in by_node], client)
            refreshed.append(current)
        at: str | None = current
        while at is not None:
            self._refresh(at)
            self._touch(at, step)
            if at != current or at not in refreshed:
                self._mark_dirty(at)
            at = self.parent.get(at)
        before = {n: self.nodes[n].meta for n in self.dirty if n in self.nodes}
        self.flush(client, step)
        refreshed += [n for n, meta in before.items() if self.nodes[n].meta is not meta]
        last = max(rows, key=lambda r: int(r["position"]), default=None)  # type: ignore[call-overload]
        self.last = _message(last) if last is not None else None
        return refreshed

    def _retell(self, topic_id: str, rows: Sequence[dict[str, object]], client: LLMClient) -> None:
        """The topic's name and summary written again from the messages it still holds."""
        topic = self.nodes[topic_id]
        if not self.summarize:  # the zero-call memory: named by position, no summary
            first, last = (int(rows[0]["position"]), int(rows[-1]["position"])) if rows else (0, 0)  # type: ignore[call-overload]
            topic.meta = topic.meta.model_copy(
                update={"title": f"messages {first}-{last}", "about": sorted({_message(r).speaker for r in rows})}
            )
            return
        batch = [_message(r) for r in rows]
        parent = self.parent[topic_id]
        chain = [parent]
        while chain[-1] in self.parent:
            chain.append(self.parent[chain[-1]])
        kept_path = self.path
        self.path = list(reversed(chain))  # the topic call sees where the topic sits, not the current path
        try:
            reply = self._decide(batch, [("new", parent)], client,
                                 positions=[int(r["position"]) for r in rows])  # type: ignore[call-overload]
        finally:
            self.path = kept_path
        if reply is None:
            meta = self._fallback_meta(batch)
        else:
            meta = NodeMeta(
                title=clip(reply.name, 60),
                summary=cap_summary(reply.summary),
                noteworthy_events=reply.events[:3],
                about=merge_ranked([reply.about, sorted({m.speaker for m in batch})], 8),
                content_types=[TOPIC],
            )
        topic.meta = meta.model_copy(update={"time_range": topic.meta.time_range})


def _message(row: dict[str, object]) -> ChatMessage:
    keys = ("role", "content", "name", "timestamp", "time", "session", "attachment")
    return ChatMessage(**{k: row.get(k) for k in keys}, id=row.get("source_id"))  # type: ignore[arg-type]
