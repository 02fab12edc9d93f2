"""The incremental topic tree of a conversation memory (ChatIndex's idea, with batching).

Shape: root → sessions (opened in code at a session boundary, dated) → topics → subtopics … → messages.
Leaves are the raw messages, verbatim, with position (1-based), speaker and time.

Adding a batch of messages (one exchange, or several consecutive messages of one session):

1. a new session opens a new session node under the root (no model call needed to decide);
2. otherwise one model call ("topic") sees the current path (session → topic → … → the deepest topic),
   the last messages and the new ones, and picks: continue the deepest topic, or open a new topic
   under the deepest topic's parent or any higher node on the path. Nothing else is reachable, so the
   tree stays in time order. The same call names the topic and writes its summary and metadata;
3. a topic that would exceed `max_children` messages is split: its messages so far become one subtopic
   (keeping its summary), the new ones another, and later continuations further sibling subtopics;
   any node with more than `max_children` children has its lowest older children packed into balanced
   groups (`knowtree.construct.rebalance`), so one long topic grows O(log n) deep;
4. ancestors whose content changed are marked dirty; a dirty node is re-summarised from its children
   (one "topic_merge" call, none when it has a single child) when it leaves the current path and at
   the end of `add`. So one exchange costs one topic call plus at most one call per ancestor: O(depth).

The model calls (topic choice, merge summaries) are in `knowtree.construct.topic_calls`; how a message
is shown to the model is `knowtree.prompts.show.message_line`.

Every step is saved (changed nodes and new messages in one transaction), and every call goes through
the cache, so an interrupted `add` resumes without repeating finished calls.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from knowtree.construct.forget import Forgetting
from knowtree.construct.metadata import cap_summary, merge_ranked
from knowtree.construct.rebalance import Rebalancing
from knowtree.construct.topic_calls import MESSAGE, SESSION, TOPIC, TopicCalls
from knowtree.ingest.chat import ChatMessage, sessions_of
from knowtree.llm.client import LLMClient
from knowtree.text import clip, human_time
from knowtree.types import Node, NodeKind, NodeMeta, Span, Usage, content_hash

Progress = Callable[[int, int], None]  # (messages added so far, messages in this add)


def shifted(progress: Progress, done: int) -> Progress:
    """`progress` told of `done` messages more, done before this add began (skipped ones)."""
    return lambda n, total: progress(n + done, total + done)


@dataclass
class StepResult:
    """What one batch changed: for the store, and for counting calls."""

    changed: dict[str, Node] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)
    messages: list[dict[str, object]] = field(default_factory=list)


@dataclass
class AddReport:
    memory: str
    added: int
    skipped: int
    messages: int
    nodes: int
    depth: int
    batches: int
    usage: Usage
    seconds: float
    fallbacks: int = 0

    def line(self) -> str:
        u = self.usage
        skipped = f" ({self.skipped} already stored)" if self.skipped else ""
        return (
            f"memory {self.memory!r}: added {self.added} message(s){skipped} in {self.batches} batch(es); "
            f"now {self.messages} messages, {self.nodes} nodes, depth {self.depth}; "
            f"{u.calls} LLM calls, {u.cached} answered from cache, "
            f"{u.input_tokens:,} input + {u.output_tokens:,} output tokens, {self.seconds:.1f}s"
        )


class TopicTree(TopicCalls, Rebalancing, Forgetting):
    """A memory's tree in memory, with the current path and the dirty set; persists via `save`."""

    def __init__(
        self,
        name: str,
        nodes: dict[str, Node],
        root_id: str | None,
        state: dict[str, Any],
        *,
        max_children: int = 8,
        summarize: bool = True,
    ) -> None:
        self.name = name
        self.summarize = summarize  # False: the zero-call memory (topics by position, no model)
        self.nodes = nodes
        self.root_id = root_id
        self.path: list[str] = list(state.get("path", []))
        self.dirty: list[str] = list(state.get("dirty", []))
        self.count: int = int(state.get("messages", 0))  # the highest position given out
        self.deleted: int = int(state.get("deleted", 0))  # messages deleted since (positions never reused)
        self.last: ChatMessage | None = (
            ChatMessage.model_validate(state["last"]) if state.get("last") else None
        )
        self.max_children = max_children
        self.parent: dict[str, str] = {c: n.id for n in nodes.values() for c in n.children}
        self.fallbacks = 0

    def state(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "dirty": self.dirty,
            "messages": self.count,
            "deleted": self.deleted,
            "last": self.last.model_dump() if self.last else None,
        }

    @property
    def stored(self) -> int:
        """How many messages the memory holds."""
        return self.count - self.deleted

    # -- helpers -------------------------------------------------------------------------------
    def _new_id(self, kind: str, first: int, last: int, parent: str) -> str:
        return content_hash(kind, self.name, str(first), str(last), parent)

    def depth(self) -> int:
        return self.nodes[self.root_id].level if self.root_id else 0

    def _touch(self, node_id: str, step: StepResult) -> None:
        step.changed[node_id] = self.nodes[node_id]
        step.removed.discard(node_id)

    def _set_children(self, node_id: str, children: list[str], step: StepResult) -> None:
        node = self.nodes[node_id]
        node.children = children
        for c in children:
            self.parent[c] = node_id
        self._refresh(node_id)
        self._touch(node_id, step)

    def _refresh(self, node_id: str) -> None:
        """Recompute a branch's level, message range and time range from its children (in code)."""
        node = self.nodes[node_id]
        kids = [self.nodes[c] for c in node.children]
        if not kids:
            return
        node.level = 1 + max(k.level for k in kids)
        first, last = kids[0].spans[0], kids[-1].spans[0]
        node.spans = [
            Span(
                file=self.name,
                start=first.start,
                end=last.end,
                line_start=first.line_start,
                line_end=last.line_end,
            )
        ]
        times = [t for k in kids for t in k.meta.time_range]
        node.meta.time_range = [min(times), max(times)] if times else []

    def _refresh_up(self, node_id: str, step: StepResult) -> None:
        current: str | None = node_id
        while current is not None:
            self._refresh(current)
            self._touch(current, step)
            current = self.parent.get(current)

    def _mark_dirty(self, node_id: str) -> None:
        if node_id not in self.dirty:
            self.dirty.append(node_id)

    # -- adding --------------------------------------------------------------------------------
    def add(
        self,
        messages: Sequence[ChatMessage],
        client: LLMClient,
        *,
        batch_size: int | None = None,
        on_step: Callable[[StepResult], None] | None = None,
        progress: Progress | None = None,
    ) -> int:
        """Add messages in batches (never across a session boundary); returns the number of batches."""
        size = max(1, min(batch_size or self.max_children, self.max_children))
        starts = sessions_of(list(messages), self.last)
        bounds = [*starts, len(messages)]
        if not starts or starts[0] != 0:
            bounds = [0, *bounds]
        batches = 0
        done = 0
        for a, b in itertools.pairwise(bounds):
            if a == b:
                continue
            session = list(messages[a:b])
            k = -(-len(session) // size)  # even batches: 19 messages, size 8 → 7 + 6 + 6
            per = -(-len(session) // k)
            for i in range(0, len(session), per):
                step = StepResult()
                self._add_batch(session[i : i + per], client, new_session=(a in starts and i == 0), step=step)
                batches += 1
                done += len(session[i : i + per])
                if on_step:
                    on_step(step)
                if progress:
                    progress(done, len(messages))
        step = StepResult()
        self.flush(client, step)
        if on_step and (step.changed or step.removed):
            on_step(step)
        return batches

    def _leaves(self, batch: Sequence[ChatMessage], parent: str, step: StepResult) -> list[Node]:
        out = []
        for m in batch:
            self.count += 1
            node, row = message_leaf(self.name, self.count, m)
            self.nodes[node.id] = node
            self.parent[node.id] = parent
            out.append(node)
            step.messages.append(row)
        self.last = batch[-1]
        return out

    def _new_branch(self, kind: str, parent: str, first: int, last: int, meta: NodeMeta) -> Node:
        node = Node(
            id=self._new_id(kind, first, last, parent),
            kind=NodeKind.BRANCH,
            level=1,
            meta=meta,
            spans=[Span(file=self.name, start=first, end=last + 1, line_start=first, line_end=last)],
        )
        self.nodes[node.id] = node
        self.parent[node.id] = parent
        return node

    def _ensure_root(self, step: StepResult) -> str:
        if self.root_id is None:
            root = Node(
                id=content_hash("root", self.name),
                kind=NodeKind.ROOT,
                level=1,
                meta=NodeMeta(title=self.name, content_types=["Conversation"]),
                spans=[Span(file=self.name, start=1, end=1, line_start=1, line_end=0)],
            )
            self.nodes[root.id] = root
            self.root_id = root.id
            self.path = [root.id]
            self._touch(root.id, step)
        return self.root_id

    def _add_batch(
        self, batch: list[ChatMessage], client: LLMClient, *, new_session: bool, step: StepResult
    ) -> None:
        root = self._ensure_root(step)
        first = self.count + 1
        last = self.count + len(batch)
        if new_session or len(self.path) < 2:
            # a session boundary: everything below the root closes, a dated session opens
            self._close(self.path[1:], client, step)
            self.path = [root]
            when = human_time(batch[0].time)
            label = f"session {batch[0].session}" if batch[0].session else "session"
            session = self._new_branch(
                "session", root, first, last, NodeMeta(title=f"{label} — {when}", content_types=[SESSION])
            )
            self._set_children(root, [*self.nodes[root].children, session.id], step)
            self.path.append(session.id)
        deepest = self.path[-1]
        has_topic = len(self.path) >= 3
        # the options, innermost first: continue the deepest topic, or a new topic under any node on
        # the path from the deepest topic's parent up to the session (time order forbids the rest)
        options: list[tuple[str, str]] = []  # (action, node id)
        if has_topic:
            options.append(("continue", deepest))
            for nid in reversed(self.path[1:-1]):
                options.append(("new", nid))
        else:
            options.append(("new", deepest))
        reply = self._decide(batch, options, client) if self.summarize else None
        action, where = options[reply.choice - 1] if reply else options[-1 if has_topic else 0]
        if reply is None and not self.summarize:  # each batch a topic of the session, named by position
            reply_meta = NodeMeta(
                title=f"messages {first}-{last}",
                about=sorted({m.speaker for m in batch}),
                content_types=[TOPIC],
            )
        elif reply is None:
            reply_meta = self._fallback_meta(batch)
        else:
            reply_meta = NodeMeta(
                title=clip(reply.name, 60),
                summary=cap_summary(reply.summary),
                noteworthy_events=reply.events[:3],
                about=merge_ranked([reply.about, sorted({m.speaker for m in batch})], 8),
                content_types=[TOPIC],
            )
        if action == "continue":
            topic = self.nodes[where]
            if len(topic.children) + len(batch) <= self.max_children:
                leaves = self._leaves(batch, where, step)
                self._set_children(where, [*topic.children, *(n.id for n in leaves)], step)
                kept = topic.meta
                topic.meta = reply_meta.model_copy(
                    update={
                        "about": merge_ranked([reply_meta.about, kept.about], 8),
                        "noteworthy_events": merge_ranked(
                            [kept.noteworthy_events, reply_meta.noteworthy_events], 4
                        ),
                        "time_range": kept.time_range,
                    }
                )
                self._refresh(where)
                for n in leaves:
                    self._touch(n.id, step)
                self._dirty_above(where, step)
                return
            up = self.parent[where]
            if self.nodes[up].meta.content_types == [TOPIC]:
                # already a subtopic: the continuation becomes its next sibling (no deeper chain); a
                # crowded topic packs its older subtopics into balanced groups (build.rebalance)
                self.path = self.path[:-1]
                where = up
                return self._open_topic(batch, where, first, last, reply_meta, step)
            # split: the topic's messages so far become one subtopic, the new ones another
            old = self._new_branch(
                "topic", where, topic.spans[0].line_start, topic.spans[0].line_end, topic.meta.model_copy()
            )
            old.children = list(topic.children)
            for c in old.children:
                self.parent[c] = old.id
            self._refresh(old.id)
            self._touch(old.id, step)
            self._set_children(where, [old.id], step)
            self._mark_dirty(where)
            parent = where
        else:
            # a new topic under `where`: what was below it on the path closes now
            below = self.path[self.path.index(where) + 1 :]
            self._close(below, client, step)
            self.path = self.path[: self.path.index(where) + 1]
            parent = where
        self._open_topic(batch, parent, first, last, reply_meta, step)

    def _open_topic(
        self,
        batch: list[ChatMessage],
        parent: str,
        first: int,
        last: int,
        reply_meta: NodeMeta,
        step: StepResult,
    ) -> None:
        topic = self._new_branch("topic", parent, first, last, reply_meta)
        leaves = self._leaves(batch, topic.id, step)
        self._set_children(topic.id, [n.id for n in leaves], step)
        for n in leaves:
            self._touch(n.id, step)
        self._set_children(parent, [*self.nodes[parent].children, topic.id], step)
        self.path.append(topic.id)
        self._dirty_above(topic.id, step)
        self._group_overfull(step)

    def _dirty_above(self, node_id: str, step: StepResult) -> None:
        current = self.parent.get(node_id)
        while current is not None:
            self._mark_dirty(current)
            current = self.parent.get(current)
        self._refresh_up(node_id, step)

    def _fallback_meta(self, batch: Sequence[ChatMessage]) -> NodeMeta:
        self.fallbacks += 1
        return NodeMeta(
            title=clip(batch[0].content, 40),
            summary=clip(" ".join(m.display() for m in batch), 300),
            about=sorted({m.speaker for m in batch}),
            content_types=[TOPIC],
            fallback="the topic reply stayed invalid: summary made of the messages' first words",
        )


def message_leaf(memory: str, pos: int, m: ChatMessage) -> tuple[Node, dict[str, object]]:
    """The leaf of message `m` at position `pos` (1-based) of `memory`, and its messages-table row."""
    node = Node(
        id=content_hash("msg", memory, str(pos), m.role, m.speaker, m.content),
        kind=NodeKind.LEAF,
        level=0,
        meta=NodeMeta(
            title=f"#{pos} {m.speaker}",
            time_range=[m.time, m.time] if m.time else [],
            content_types=[MESSAGE],
            about=[m.speaker],
        ),
        text=m.display(),
        spans=[Span(file=memory, start=pos, end=pos + 1, line_start=pos, line_end=pos)],
    )
    row: dict[str, object] = {
        "position": pos,
        "role": m.role,
        "name": m.name,
        "content": m.content,
        "timestamp": m.timestamp,
        "time": m.time,
        "session": m.session,
        "source_id": m.id,
        "attachment": m.attachment,
        "node_id": node.id,
        "add_key": m.key,
    }
    return node, row
