"""The model calls that shape a memory's topic tree: where a batch of messages goes, and summaries.

* `topic`: one call per batch sees the current path, the last messages and the new ones, and picks an
  option (continue the deepest topic, or open a new topic under a node of the path); the same reply
  names the topic and summarises it (`TopicReply`, its `choice` narrowed to the options shown).
* `topic_merge`: a changed node with several children is re-summarised from them (`MergeReply`),
  when it leaves the current path and at the end of an `add`.

`TopicCalls` is mixed into `knowtree.construct.conversation.TopicTree`, which holds the nodes, the
path and the dirty set these methods read and update.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import StrictInt

from knowtree.construct.metadata import cap_summary, merge_ranked
from knowtree.errors import ModelOutputError
from knowtree.ingest.chat import ChatMessage
from knowtree.llm.client import LLMClient
from knowtree.prompts.reply import Reply, ask, listed, narrowed, reply_schema, string, strings
from knowtree.prompts.show import message_line
from knowtree.text import clip, human_range, human_time
from knowtree.types import Node, NodeKind, NodeMeta

SESSION = "Conversation session"
TOPIC = "Conversation topic"
MESSAGE = "Message"


class TopicReply(Reply):
    choice: StrictInt
    name: str = string(60, ..., min_length=1)
    summary: str = string(400, ..., min_length=1)
    events: list[str] = strings(3, 120)
    about: list[str] = strings(6, 40)

    _lists = listed("events", "about")


class MergeReply(Reply):
    name: str = string(60, ..., min_length=1)
    summary: str = string(500, ..., min_length=1)
    events: list[str] = strings(4, 120)

    _lists = listed("events")


def topic_reply(n_options: int) -> type[TopicReply]:
    """`TopicReply` with its choice limited to the options shown (1 … n)."""
    return narrowed(TopicReply, choice={"enum": list(range(1, n_options + 1))})


def topic_schema(n_options: int) -> dict[str, Any]:
    return reply_schema(topic_reply(n_options))


MERGE_SCHEMA: dict[str, Any] = reply_schema(MergeReply)  # derived: the schema a merge call sends


class TopicCalls:
    """The topic and merge calls of a `TopicTree` (which sets these attributes)."""

    nodes: dict[str, Node]
    path: list[str]
    dirty: list[str]
    count: int
    summarize: bool
    fallbacks: int

    if TYPE_CHECKING:

        def _touch(self, node_id: str, step: Any) -> None: ...

    def _decide(
        self, batch: Sequence[ChatMessage], options: list[tuple[str, str]], client: LLMClient,
        positions: Sequence[int] | None = None,
    ) -> TopicReply | None:
        """`positions`: the batch's message positions (default: the next ones, `count + 1`...)."""
        path_lines = []
        for depth, nid in enumerate(self.path[1:]):
            n = self.nodes[nid]
            path_lines.append(
                f"{'  ' * depth}- {n.meta.title or 'untitled'} ({human_range(n.meta.time_range)}): "
                f"{clip(n.meta.summary, 160) or 'no summary yet'}"
            )
        deepest = self.nodes[self.path[-1]]
        recent = [self.nodes[c] for c in deepest.children if self.nodes[c].is_leaf][-2:]
        numbers = list(positions) if positions is not None else [self.count + 1 + i for i in range(len(batch))]
        new_lines = []
        for i, m in enumerate(batch):
            when = human_time(m.time).split(",")[0] if m.time else "undated"
            new_lines.append(
                f"[{numbers[i]}] {m.speaker} ({when}): {clip(m.display().partition(': ')[2], 260)}"
            )
        option_lines = []
        for i, (action, nid) in enumerate(options, 1):
            title = self.nodes[nid].meta.title or "untitled"
            if action == "continue":
                option_lines.append(f'{i}: continue the current topic "{title}"')
            elif self.nodes[nid].meta.content_types == [SESSION]:
                option_lines.append(f"{i}: start a new topic in this session")
            else:
                option_lines.append(f'{i}: start a new subtopic of "{title}"')
        hint = (
            "if you continue, the current topic's summary updated with the new messages; "
            "otherwise a summary of the new messages (1-2 sentences)."
            if options[0][0] == "continue"
            else "a summary of the new messages (1-2 sentences)."
        )
        try:
            result = ask(
                client,
                topic_reply(len(options)),
                "topic",
                path="\n".join(path_lines) or "(a new session)",
                recent="\n".join(message_line(n, 200) for n in recent) or "(none)",
                new="\n".join(new_lines),
                options="\n".join(option_lines),
                summary_hint=hint,
                purpose="topic",
                max_tokens=260,
                check=lambda r: _in_range(r.choice, len(options)),
            )
        except ModelOutputError:
            return None
        return result.value

    # -- summaries of changed nodes ------------------------------------------------------------
    def _close(self, ids: Sequence[str], client: LLMClient, step: Any) -> None:
        """Nodes leaving the current path get their final summaries (deepest first)."""
        for nid in reversed(list(ids)):
            if nid in self.dirty:
                self._summarise(nid, client, step)

    def flush(self, client: LLMClient, step: Any) -> None:
        """Re-summarise every dirty node, children before parents."""
        for nid in sorted(self.dirty, key=lambda i: self.nodes[i].level if i in self.nodes else 0):
            if nid in self.nodes:
                self._summarise(nid, client, step)
        self.dirty = []

    def _summarise(self, nid: str, client: LLMClient, step: Any) -> None:
        node = self.nodes[nid]
        if nid in self.dirty:
            self.dirty.remove(nid)
        kids = [self.nodes[c] for c in node.children]
        if not kids or kids[0].is_leaf:
            return  # message topics are written by the topic call itself
        # a dirty child is summarised first (a group made of sessions that changed, say)
        for k in kids:
            if k.id in self.dirty:
                self._summarise(k.id, client, step)
        kind = node.meta.content_types
        title = node.meta.title
        if len(kids) == 1:
            only = kids[0].meta
            meta = only.model_copy(update={"content_types": kind, "time_range": node.meta.time_range})
            if kind == [SESSION] or node.kind is NodeKind.ROOT:
                meta.title = title
        elif not self.summarize:  # the zero-call memory: where it is and who speaks, no summary
            about = merge_ranked([k.meta.about for k in kids], 8)
            meta = NodeMeta(title=title, about=about, content_types=kind, time_range=node.meta.time_range)
        else:
            meta = self._merge(kids, client)
            meta.content_types = kind
            meta.time_range = node.meta.time_range
            if kind == [SESSION] or node.kind is NodeKind.ROOT:
                meta.title = title  # sessions keep their dated title, the root the memory's name
        node.meta = meta
        self._touch(nid, step)

    def _merge(self, kids: list[Node], client: LLMClient) -> NodeMeta:
        shown = "\n".join(
            f"Part {i} — {k.meta.title} ({human_range(k.meta.time_range)}): {clip(k.meta.summary, 220)}"
            for i, k in enumerate(kids, 1)
        )
        about = merge_ranked([k.meta.about for k in kids], 12)
        try:
            result = ask(
                client,
                MergeReply,
                "topic_merge",
                count=len(kids),
                children=shown,
                purpose="topic_merge",
                max_tokens=300,
            )
        except ModelOutputError as exc:
            self.fallbacks += 1
            return NodeMeta(
                title=" / ".join(clip(k.meta.title, 30) for k in kids[:3]),
                summary=" ".join(clip(k.meta.summary, 120) for k in kids),
                noteworthy_events=merge_ranked([k.meta.noteworthy_events for k in kids], 4),
                about=about,
                fallback=f"summary joined from the parts: {exc}",
            )
        r = result.value
        return NodeMeta(
            title=clip(r.name, 60),
            summary=cap_summary(r.summary),
            noteworthy_events=r.events[:4] or merge_ranked([k.meta.noteworthy_events for k in kids], 4),
            about=about,
        )


def _in_range(choice: int, n: int) -> None:
    if not 1 <= choice <= n:
        raise ValueError(f"choice must be one of {list(range(1, n + 1))}, got {choice}")
