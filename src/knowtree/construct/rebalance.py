"""Keeping a conversation tree shallow: crowded nodes are packed into balanced groups (B-tree-like).

Messages only ever arrive at the right end of the tree (time order), so a node on the current path
grows by appending children. When it holds more than `max_children`, its older children (never the
last one: it is on the current path) are packed into a new "period" group, always choosing the
*lowest* children first: the oldest run of at least two consecutive children whose height is at most
the smallest height that has such a run, up to `max_children` of them. When the child just before
that run is a group one level up with room left, the run tops it up instead (the rightmost group of
each level stays open until full, as in a B-tree), so groups hold `max_children` children. For one
long topic: eight subtopics make a group, eight groups a group of groups, and so on; the depth grows
as log_8(messages), not by one level every 56 messages as before.

`pack_run` is pure (ids and heights in, the slice to group out), so it is tested on its own;
`Rebalancing._group_overfull` applies it to the tree and records what changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from knowtree.types import Node, NodeMeta

GROUP = "Conversation period"


def pack_run(levels: Sequence[int], max_children: int) -> tuple[int, int] | None:
    """The slice [a, b) of children to pack into one group, or None when nothing needs packing.

    `levels` are the children's heights in order; the last child is never packed. Packing happens
    only when there are more than `max_children` children."""
    n = len(levels)
    if n <= max_children or n < 3:
        return None
    candidates = levels[:-1]
    for cap in sorted(set(candidates)):
        start = None
        for i, level in enumerate([*candidates, cap + 1]):  # a sentinel closes the last run
            if level <= cap:
                start = i if start is None else start
                continue
            if start is not None and i - start >= 2:
                return start, min(i, start + max_children)
            start = None
    return 0, 2  # unreachable with ≥ 2 candidates, kept as a safe answer


class Rebalancing:
    """Mixed into `TopicTree`: the grouping step (it uses the tree's own node helpers)."""

    nodes: dict[str, Node]
    parent: dict[str, str]
    path: list[str]
    max_children: int

    if TYPE_CHECKING:

        def _new_branch(self, kind: str, parent: str, first: int, last: int, meta: NodeMeta) -> Node: ...
        def _refresh(self, node_id: str) -> None: ...
        def _touch(self, node_id: str, step: Any) -> None: ...
        def _set_children(self, node_id: str, children: list[str], step: Any) -> None: ...
        def _mark_dirty(self, node_id: str) -> None: ...
        def _refresh_up(self, node_id: str, step: Any) -> None: ...

    def _group_overfull(self, step: Any) -> None:
        """Every node on the current path with more than max_children children gets its lowest older
        children packed into groups until it fits."""
        from knowtree.types import NodeMeta

        for nid in list(self.path):
            while True:
                kids = self.nodes[nid].children
                if not kids or self.nodes[kids[0]].is_leaf:
                    break  # a topic of messages is split by the topic step, not grouped
                run = pack_run([self.nodes[k].level for k in kids], self.max_children)
                if run is None:
                    break
                a, b = run
                older = kids[a:b]
                if self._extend_previous(nid, kids, a, b, step):
                    continue
                first, last = self.nodes[older[0]].spans[0], self.nodes[older[-1]].spans[0]
                group = self._new_branch(
                    "group", nid, first.line_start, last.line_end, NodeMeta(content_types=[GROUP])
                )
                group.children = list(older)
                for c in older:
                    self.parent[c] = group.id
                self._refresh(group.id)
                self._touch(group.id, step)
                self._set_children(nid, [*kids[:a], group.id, *kids[b:]], step)
                self._mark_dirty(group.id)
                self._refresh_up(nid, step)

    def _extend_previous(self, nid: str, kids: list[str], a: int, b: int, step: Any) -> bool:
        """Fill the group just before the run when it is one level up and has room (so groups fill
        to `max_children`, as B-tree nodes do, instead of shrinking as older levels take slots)."""
        if a == 0:
            return False
        prev = self.nodes[kids[a - 1]]
        level = max(self.nodes[k].level for k in kids[a:b])
        room = self.max_children - len(prev.children)
        if prev.meta.content_types != [GROUP] or prev.level != level + 1 or room <= 0:
            return False
        moved = kids[a : a + min(room, b - a)]
        prev.children = [*prev.children, *moved]
        for c in moved:
            self.parent[c] = prev.id
        self._refresh(prev.id)
        self._touch(prev.id, step)
        self._mark_dirty(prev.id)
        self._set_children(nid, [*kids[:a], *kids[a + len(moved) :]], step)
        self._refresh_up(nid, step)
        return True
