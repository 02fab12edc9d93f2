"""The web tree browser at /ui: server-rendered HTML (the outline works without JavaScript: nested
<details> lists, natively keyboard accessible), enhanced by ui/app.js (ask with streamed navigation,
citations that jump to their node, the path highlighted, live build jobs). No CDN, no build step.
"""

from __future__ import annotations

from html import escape
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response

from knowtree.server.problems import Problem
from knowtree.server.service import Service, brief
from knowtree.server.tenancy import Principal
from knowtree.types import Node, Span

STATIC = {"app.js": "text/javascript", "style.css": "text/css"}
COOKIE = "knowtree_key"


def install(app: FastAPI) -> None:
    @app.get("/ui", include_in_schema=False, response_class=HTMLResponse)
    def page(request: Request, tree: str | None = None, node: str | None = None) -> HTMLResponse:
        svc: Service = request.app.state.service
        headers = dict(request.headers)
        cookie = request.cookies.get(COOKIE)
        if cookie and "authorization" not in headers:
            headers["authorization"] = f"Bearer {cookie}"
        try:
            p = request.app.state.auth.authenticate(headers)
        except Problem as exc:
            return HTMLResponse(_layout("knowtree", _login(exc.detail)), status_code=exc.status)
        return HTMLResponse(_layout(f"knowtree · {tree}" if tree else "knowtree", _body(svc, p, tree, node)))

    @app.get("/ui/", include_in_schema=False, response_class=HTMLResponse)
    def page_slash(request: Request, tree: str | None = None, node: str | None = None) -> HTMLResponse:
        return page(request, tree, node)

    @app.get("/ui/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        if name not in STATIC:
            raise Problem(404, "no such file")
        body = resources.files("knowtree.server").joinpath("ui", name).read_bytes()
        return Response(body, media_type=STATIC[name], headers={"Cache-Control": "no-cache"})


def _layout(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title>"
        '<link rel="stylesheet" href="/ui/static/style.css"></head><body>'
        f'{body}<script src="/ui/static/app.js" defer></script></body></html>'
    )


def _login(detail: str) -> str:
    return (
        '<main class="login"><h1>knowtree</h1>'
        f'<p role="alert">{escape(detail)}</p>'
        '<form id="key-form"><label for="key">API key</label> '
        '<input id="key" name="key" type="password" autocomplete="off" required> '
        '<button type="submit">Use key</button></form></main>'
    )


def _body(svc: Service, p: Principal, tree: str | None, node: str | None) -> str:
    trees = svc.list_trees(p)
    items = "".join(
        f'<li><a href="/ui?tree={quote(t.name)}"{" aria-current=page" if t.name == tree else ""}>'
        f"{escape(t.name)}</a> <span class=meta>{escape(t.kind)} · {t.nodes} nodes</span></li>"
        for t in trees
    ) or "<li>no trees yet</li>"
    side = (
        '<nav class="trees" aria-label="Trees"><h2>Trees &amp; memories</h2>'
        f'<ul>{items}</ul>'
        '<section id="jobs" aria-label="Build jobs"><h2>Build</h2>'
        '<form id="upload-form"><label>tree <input name="tree" required pattern="[A-Za-z0-9][A-Za-z0-9._-]*"'
        f' value="{escape(tree or "")}"></label>'
        '<input type="file" name="files" multiple required aria-label="files to build from">'
        '<button type="submit">Upload &amp; build</button></form>'
        '<ul id="job-list" aria-live="polite"></ul></section></nav>'
    )
    main = "<p>Choose a tree.</p>" if not tree else _tree_view(svc, p, tree, node)
    return (
        f'<header><h1><a href="/ui">knowtree</a></h1><span class="who">{escape(p.tenant)}</span></header>'
        f'<div class="layout">{side}<main id="main" data-tree="{escape(tree or "")}">{main}</main></div>'
    )


def _tree_view(svc: Service, p: Principal, tree: str, node_id: str | None) -> str:
    try:
        t = svc.view(p, tree)
    except Problem as exc:
        return f'<p role="alert">{escape(exc.detail)}</p>'
    selected: Node | None = None
    if node_id:
        try:
            selected = t.nodes.get(svc.node_view(p, tree, node_id).id)
        except Problem as exc:
            return f'<p role="alert">{escape(exc.detail)}</p>'
    open_ids = _ancestors(t.nodes, selected.id) if selected else set()
    outline = (
        _outline(t.nodes, t.info.root_id, tree, open_ids, 0) if t.info.root_id in t.nodes else "<p>(empty)</p>"
    )
    kind = "conversation memory: sessions → topics → messages" if t.info.kind == "conversation" else "documents"
    detail = _node_panel(selected) if selected else '<p class="hint">Select a node to read it.</p>'
    return (
        f'<h2>{escape(tree)} <span class="meta">{escape(kind)} · {t.info.nodes} nodes</span></h2>'
        '<form id="ask-form" class="ask"><label for="q">Ask</label> '
        '<input id="q" name="q" required placeholder="a question about this tree" autocomplete="off"> '
        '<button type="submit">Ask</button></form>'
        '<section id="answer" aria-live="polite" hidden></section>'
        f'<div class="split"><section class="outline" aria-label="Outline"><ul class="tree" role="tree">{outline}</ul></section>'
        f'<section id="node" class="node" aria-label="Node">{detail}</section></div>'
    )


def _ancestors(nodes: dict[str, Node], target: str) -> set[str]:
    parent = {c: n.id for n in nodes.values() for c in n.children}
    out = {target}
    while target in parent:
        target = parent[target]
        out.add(target)
    return out


def _outline(nodes: dict[str, Node], node_id: str | None, tree: str, open_ids: set[str], depth: int) -> str:
    if node_id is None or node_id not in nodes:
        return ""
    n = nodes[node_id]
    b = brief(n)
    label = (
        f'<a class="node-link" href="/ui?tree={quote(tree)}&amp;node={n.id}" data-node="{n.id}">'
        f"{escape(b.title[:120])}</a> <span class=meta>{escape(span_text(n))}</span>"
        f'<span class="summary">{escape(b.summary[:240])}</span>'
    )
    if not n.children:
        return f'<li role="treeitem" id="n-{n.id}" data-node="{n.id}">{label}</li>'
    opened = " open" if depth == 0 or n.id in open_ids else ""
    kids = "".join(_outline(nodes, c, tree, open_ids, depth + 1) for c in n.children)
    return (
        f'<li role="treeitem" id="n-{n.id}" data-node="{n.id}" aria-expanded="{str(bool(opened)).lower()}">'
        f'<details{opened}><summary>{label}</summary><ul role="group">{kids}</ul></details></li>'
    )


def span_text(n: Node) -> str:
    """Page ranges (PDF), line ranges, or message positions and times (memories)."""
    if not n.spans:
        return ""
    first, last = n.spans[0], n.spans[-1]
    if n.meta.time_range:
        times = " – ".join(dict.fromkeys(t[:16] for t in n.meta.time_range))
        return f"messages {_range(first, last)} · {times}"
    if first.page_start is not None:
        return f"pp. {first.page_start}–{last.page_end or first.page_start}"
    files = {s.file for s in n.spans}
    where = Path(first.file).name if len(files) == 1 else f"{len(files)} files"
    return f"{where}:{_range(first, last)}"


def _range(first: Span, last: Span) -> str:
    a, b = first.line_start, max(s.line_end for s in [first, last])
    return str(a) if a == b else f"{a}-{b}"


def _node_panel(n: Node) -> str:
    meta: dict[str, Any] = n.meta.model_dump()
    rows = "".join(
        f"<dt>{escape(k.replace('_', ' '))}</dt><dd>{escape(', '.join(v) if isinstance(v, list) else str(v))}</dd>"
        for k, v in meta.items()
        if v and k != "summary"
    )
    return (
        f'<h3>{escape(brief(n).title)}</h3><p class="meta">{escape(n.kind.value)} · {escape(span_text(n))} · '
        f"<code>{n.id}</code></p><p>{escape(n.meta.summary)}</p><dl>{rows}</dl>"
        + (f'<pre class="text">{escape(n.text)}</pre>' if n.text else "")
    )
