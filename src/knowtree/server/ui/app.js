// knowtree web UI: progressive enhancement of the server-rendered page (no framework, no CDN).
"use strict";

const KEY = "knowtree_key";
const main = document.getElementById("main");
const tree = main ? main.dataset.tree : "";

function headers(extra) {
  const h = Object.assign({}, extra || {});
  const key = localStorage.getItem(KEY);
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

// Server-Sent Events over fetch (EventSource cannot send a key or POST a body).
async function sse(url, options, onEvent) {
  const response = await fetch(url, options);
  if (!response.ok || !response.body) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail; } catch (e) { /* not JSON */ }
    throw new Error(detail);
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let event = "message", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) event = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      onEvent(event, data ? JSON.parse(data) : null);
    }
  }
}

// ---- the outline --------------------------------------------------------------------------
function nodeItem(id) { return document.getElementById("n-" + id); }

function reveal(id) {
  let item = nodeItem(id);
  while (item) {
    const d = item.closest("details");
    if (!d) break;
    d.open = true;
    const li = d.parentElement;
    if (li) li.setAttribute("aria-expanded", "true");
    item = li && li.parentElement ? li.parentElement.closest("li") : null;
  }
}

function spanText(spans) {
  if (!spans || !spans.length) return "";
  const a = spans[0], b = spans[spans.length - 1];
  if (a.page_start) return "pp. " + a.page_start + "–" + (b.page_end || a.page_start);
  return a.file.split("/").pop() + ":" + a.line_start + "-" + b.line_end;
}

async function showNode(id, push) {
  const panel = document.getElementById("node");
  if (!panel || !tree) return;
  const r = await fetch("/v1/trees/" + encodeURIComponent(tree) + "/nodes/" + encodeURIComponent(id), { headers: headers() });
  const n = await r.json();
  if (!r.ok) { panel.replaceChildren(el("p", { role: "alert" }, n.detail)); return; }
  const meta = el("dl");
  for (const [k, v] of Object.entries(n.meta)) {
    if (k === "summary" || !v || (Array.isArray(v) && !v.length)) continue;
    meta.append(el("dt", {}, k.replace(/_/g, " ")), el("dd", {}, Array.isArray(v) ? v.join(", ") : String(v)));
  }
  const kids = el("ul", { class: "children" });
  for (const c of n.children) {
    kids.append(el("li", {}, el("a", { href: "#n-" + c.id, "data-node": c.id, class: "node-link" }, c.title), " ", el("span", { class: "meta" }, c.summary.slice(0, 140))));
  }
  panel.replaceChildren(...[
    el("h3", {}, n.meta.title || (n.kind === "leaf" ? spanText(n.spans) : n.kind)),
    el("p", { class: "meta" }, n.kind + " · " + spanText(n.spans) + " · ", el("code", {}, n.id)),
    el("p", {}, n.meta.summary),
    meta,
    n.children.length ? el("h4", {}, "Children") : null,
    n.children.length ? kids : null,
    n.text ? el("pre", { class: "text" }, n.text) : null,
  ].filter((x) => x !== null));
  document.querySelectorAll(".tree li.selected").forEach((e) => e.classList.remove("selected"));
  const item = nodeItem(n.id);
  if (item) { item.classList.add("selected"); reveal(n.id); }
  if (push) history.replaceState(null, "", "/ui?tree=" + encodeURIComponent(tree) + "&node=" + n.id);
}

document.addEventListener("click", (ev) => {
  const a = ev.target.closest("a.node-link, button.cite");
  if (!a || !tree) return;
  ev.preventDefault();
  showNode(a.dataset.node, true);
  const item = nodeItem(a.dataset.node);
  if (item) item.querySelector("a").focus();
});

document.addEventListener("toggle", (ev) => {
  const d = ev.target;
  if (d.tagName === "DETAILS" && d.parentElement) d.parentElement.setAttribute("aria-expanded", String(d.open));
}, true);

// ---- asking -------------------------------------------------------------------------------
// the nodes the trace went through, and every cited node with the branches above it (an answer
// found through the index has no walk to show: its path is the cited leaf's place in the tree)
function highlightPath(trace, citations) {
  document.querySelectorAll(".tree .on-path").forEach((e) => e.classList.remove("on-path"));
  for (const step of trace) {
    for (const id of [step.node_id, step.choice]) {
      if (!id) continue;
      const item = nodeItem(id);
      if (item) { item.classList.add("on-path"); reveal(id); }
    }
  }
  for (const c of citations || []) {
    let item = c.node_id ? nodeItem(c.node_id) : null;
    if (item) reveal(c.node_id);
    while (item) {
      item.classList.add("on-path");
      item = item.parentElement ? item.parentElement.closest("li[role=treeitem]") : null;
    }
  }
}

const askForm = document.getElementById("ask-form");
if (askForm) {
  askForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const out = document.getElementById("answer");
    const question = askForm.elements.q.value;
    const steps = el("ol", { class: "steps" });
    const text = el("p", { class: "answer-text" });
    out.hidden = false;
    out.replaceChildren(el("h3", {}, "Answer"), text, el("h4", {}, "Path"), steps);
    const trace = [];
    try {
      await sse("/v1/trees/" + encodeURIComponent(tree) + "/ask", {
        method: "POST",
        headers: headers({ "Content-Type": "application/json" }),
        body: JSON.stringify({ question: question, stream: true }),
      }, (event, data) => {
        if (event === "step") {
          trace.push(data);
          steps.append(el("li", {}, data.action + (data.source ? " " + data.source.split("/").pop() : "") + (data.outcome ? ": " + data.outcome.slice(0, 120) : "")));
          highlightPath(trace);
        } else if (event === "token") {
          text.textContent += data.text;
        } else if (event === "answer") {
          text.textContent = data.answer || "(no answer found)";
          out.insertBefore(el("p", { class: "status status-" + data.status }, "status: " + data.status), steps.previousSibling);
          const cites = el("ul", { class: "citations" });
          for (const c of data.citations) {
            const where = c.speaker ? "message " + c.line_start + " · " + c.speaker + (c.timestamp ? " · " + c.timestamp : "")
              : c.page_start ? c.file.split("/").pop() + " pp. " + c.page_start + "–" + (c.page_end || c.page_start)
              : c.file.split("/").pop() + ":" + c.line_start + "-" + c.line_end;
            cites.append(el("li", {}, el("button", { type: "button", class: "cite", "data-node": c.node_id }, where),
              c.quote ? el("q", {}, c.quote.slice(0, 300)) : null));
          }
          out.insertBefore(el("h4", {}, "Citations"), steps.previousSibling);
          out.insertBefore(cites, steps.previousSibling);
          highlightPath(data.trace && data.trace.length ? data.trace : trace, data.citations);
          out.dataset.done = "1";
        } else if (event === "error") {
          text.textContent = "error: " + data.detail;
          out.dataset.done = "1";
        }
      });
    } catch (e) {
      text.textContent = "error: " + e.message;
      out.dataset.done = "1";
    }
  });
}

// ---- build jobs ---------------------------------------------------------------------------
const jobList = document.getElementById("job-list");

function jobLine(job) {
  const p = job.progress || {};
  const bar = el("progress", { max: String(p.total || 1), value: String(p.done || 0), "aria-label": "progress of job " + job.id });
  const line = el("li", { id: "job-" + job.id },
    el("strong", {}, job.tree), " ", el("span", { class: "state" }, job.state),
    p.stage ? " " + p.stage + " " + (p.done || 0) + "/" + (p.total || 0) : "", " ", bar,
    job.error ? el("span", { class: "error" }, " " + job.error) : null);
  if (job.state === "queued" || job.state === "running") {
    line.append(" ", el("button", { type: "button", onclick: () => fetch("/v1/jobs/" + job.id + "/cancel", { method: "POST", headers: headers() }) }, "cancel"));
  }
  return line;
}

function putJob(job) {
  const old = document.getElementById("job-" + job.id);
  const line = jobLine(job);
  if (old) old.replaceWith(line); else jobList.prepend(line);
}

async function follow(job) {
  putJob(job);
  try {
    await sse("/v1/jobs/" + job.id + "/events", { headers: headers() }, (event, data) => {
      putJob(data);
      if (event === "done" && data.tree === tree) setTimeout(() => location.reload(), 300);
    });
  } catch (e) { /* the list stays as it was */ }
}

if (jobList) {
  fetch("/v1/jobs?limit=5", { headers: headers() }).then((r) => r.ok ? r.json() : []).then((jobs) => {
    for (const job of jobs.reverse()) {
      if (job.state === "queued" || job.state === "running") follow(job); else putJob(job);
    }
  });
  const form = document.getElementById("upload-form");
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const data = new FormData();
    for (const f of form.elements.files.files) data.append("files", f);
    const name = form.elements.tree.value;
    const r = await fetch("/v1/trees/" + encodeURIComponent(name) + "/upload", { method: "POST", headers: headers(), body: data });
    const body = await r.json();
    if (!r.ok) { jobList.prepend(el("li", { class: "error", role: "alert" }, body.detail)); return; }
    follow(body);
  });
}

// ---- API key ------------------------------------------------------------------------------
const keyForm = document.getElementById("key-form");
if (keyForm) {
  keyForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const key = keyForm.elements.key.value.trim();
    localStorage.setItem(KEY, key);
    document.cookie = "knowtree_key=" + encodeURIComponent(key) + "; path=/ui; SameSite=Strict";
    location.reload();
  });
}

const params = new URLSearchParams(location.search);
if (params.get("node")) { reveal(params.get("node")); const i = nodeItem(params.get("node")); if (i) i.classList.add("selected"); }
