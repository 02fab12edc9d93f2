"""Plain-text renderings of answers, traces and trees for the terminal."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from knowtree.types import Answer, Node, NodeMeta

if TYPE_CHECKING:
    from knowtree.tree import Tree

_STATUS = {
    "complete": "complete",
    "partial": "PARTIAL: part of the question is not answered by the tree",
    "none": "NO ANSWER: the tree holds nothing that answers this",
}


def render_answer(answer: Answer, *, trace: bool = False) -> str:
    lines = [answer.answer or "No answer found in this tree.", "", f"status: {_STATUS[answer.status]}"]
    if answer.citations:
        lines.append("citations:")
        for c in answer.citations:
            if c.page_start is not None:  # paged sources (PDF): the physical pages
                pages = f"p. {c.page_start}" if c.page_end in (None, c.page_start) else f"pp. {c.page_start}-{c.page_end}"
                lines.append(f"  {c.file}, {pages}  (lines {c.line_start}-{c.line_end}, node {c.node_id})")
            elif c.char_start is not None and c.line_start == c.line_end:  # a passage of a message
                lines.append(
                    f"  {c.file}: message {c.line_start}, characters {c.char_start}-{c.char_end}  (node {c.node_id})"
                )
            else:
                lines.append(f"  {c.file}:{c.line_start}-{c.line_end}  (node {c.node_id})")
            if c.quote:
                lines.append(f'    "{textwrap.shorten(c.quote, 160)}"')
    u = answer.usage
    lines.append(
        f"usage: {u.calls} LLM calls, {u.cached} cached, {u.input_tokens + u.output_tokens:,} tokens, {u.seconds:.1f}s"
    )
    if trace:
        lines.append("trace:")
        for i, s in enumerate(answer.trace, 1):
            head = f"  {i:2}. {s.action:9}"
            if s.node_id:
                head += f" at {s.node_id}"
            if s.source:
                head += f" ({s.source})"
            if s.choice:
                pos = s.options.index(s.choice) + 1 if s.choice in s.options else "?"  # 1-based, as sources are
                head += f" → option {pos} of {len(s.options)} ({s.choice})"
            lines.append(head)
            for label, value in (("reason", s.reason), ("outcome", s.outcome), ("ERROR", s.error)):
                if value:
                    lines.append(f"      {label}: {textwrap.shorten(value, 200)}")
            if s.tokens or s.latency_s:
                lines.append(f"      {s.tokens} tokens, {s.latency_s:.1f}s{' (cached)' if s.cached else ''}")
    return "\n".join(lines)


def _meta_lines(meta: NodeMeta, indent: str) -> list[str]:
    def j(xs: list[str]) -> str:
        return "; ".join(xs) if xs else "-"

    types = j(meta.content_types)
    if meta.unlisted_types:
        types += f"   (not in taxonomy: {', '.join(meta.unlisted_types)})"
    out = [
        f"{indent}Summary: {meta.summary}",
        f"{indent}Content types: {types}",
        f"{indent}Critical actions: {j(meta.critical_actions)}",
        f"{indent}Decisions: {j(meta.decisions)}",
        f"{indent}Noteworthy events: {j(meta.noteworthy_events)}",
        f"{indent}About: {', '.join(meta.about) if meta.about else '-'}",
    ]
    if meta.fallback:
        out.append(f"{indent}FALLBACK: {meta.fallback}")
    return out


def _when(times: list[str]) -> str:
    from knowtree.text import human_range, human_time

    return human_time(times[0]) if times[0] == times[-1] else human_range(times)


def render_node(node: Node, *, full: bool = False, indent: str = "") -> str:
    where = ", ".join(
        f"{s.file}:{s.line_start}-{s.line_end}" + (f" (pp. {s.page_start}-{s.page_end})" if s.page_start else "")
        for s in node.spans
    )
    head = f"{indent}[{node.kind.value}] {node.id}  level {node.level}  {where}"
    if node.meta.time_range:  # conversation memories: when, and the message verbatim for a leaf
        head += f"  [{_when(node.meta.time_range)}]"
        if node.is_leaf:
            return f"{head}\n{indent}    {node.text if full else textwrap.shorten(node.text, 400)}"
    if node.meta.title:
        head += f"  {node.meta.title!r}"
    if not node.is_leaf:
        head += f"  ({len(node.children)} children)"
    lines = [head, *_meta_lines(node.meta, indent + "    ")]
    if full and node.is_leaf:
        lines += ["", node.text]
    elif full:
        lines.append(f"{indent}    Children: {', '.join(node.children)}")
    return "\n".join(lines)


def render_outline(tree: Tree, *, max_depth: int | None = None) -> str:
    info = tree.info
    lines = [
        f"tree {info.name!r}: {info.documents} document(s), {info.nodes} nodes, {info.leaves} leaves, "
        f"depth {info.depth}, model {info.model}",
        "",
    ]
    nodes = tree.nodes

    def visit(node_id: str, depth: int) -> None:
        node = nodes[node_id]
        lines.append(render_node(node, indent="    " * depth))
        if max_depth is not None and depth >= max_depth:
            return
        for child in node.children:
            visit(child, depth + 1)

    visit(tree.root.id, 0)
    return "\n".join(lines)
