"""Conversation memory: `mem = kt.memory("chat")`, `mem.add(messages)`, `mem.ask(q)`, `mem.context(q, budget)`.

A memory is a tree of kind "conversation" in the same database as document trees: its leaves are the
messages, verbatim (also kept row by row in the `messages` table), under dated sessions and topics
(see `knowtree.construct.conversation`). How a question runs is decided by `knowtree.answer.router`,
with the same `mode` vocabulary as `Tree.ask`: the memory as an index read by the memory answer step
(auto, the default, and `mode="retrieve"`), the tree walk of `knowtree.answer.memory`
(`mode="walk"` or `navigator="tree"`), the tool-using agent of `knowtree.answer.agent`
(`navigator="agent"`), or the judged beam of `mode="nav"`; `stream` yields navigation events as they
happen, then the answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from knowtree.answer.hybrid import HybridScorer
from knowtree.answer.memory import MemoryNavigator, MemoryOptions
from knowtree.answer.router import route
from knowtree.construct.conversation import AddReport, Progress, StepResult, TopicTree, shifted
from knowtree.construct.forget import DeleteReport
from knowtree.errors import NotFoundError, UserError
from knowtree.ingest.chat import ChatMessage, load_chat, parse_messages, unseen
from knowtree.types import Answer, NavStep, Node, Usage

if TYPE_CHECKING:
    from knowtree.host import Host
    from knowtree.retrieve.treesearch import Evidence

KIND = "conversation"
Navigator = Literal["tree", "agent"]


class Memory:
    """One conversation memory. `kt.memory(name)` for a name that is another kind of tree raises
    `NotFoundError`; a missing memory is created by its first `add`, and reading it before
    (`messages`, `ask`, `context`, `stream`) raises `NotFoundError`."""

    def __init__(self, kt: Host, name: str) -> None:
        if kt.store.tree_exists(name):
            kind = kt.store.tree_info(name).kind
            if kind != KIND:
                raise NotFoundError(f"{name!r} is a {kind} tree, not a conversation memory")
        self.kt = kt
        self.name = name
        self.embedder: Any = (
            "default"  # an embedder name ("default", "hash"...), None (BM25 only) or an Embedder
        )
        self.last_retrieval: Any = None

    # -- state ---------------------------------------------------------------------------------
    @property
    def exists(self) -> bool:
        return self.kt.store.tree_exists(self.name)

    def _check_kind(self) -> None:
        """NotFoundError (naming the trees there) for a missing memory; UserError for another kind."""
        info = self.kt.store.tree_info(self.name)
        if info.kind != KIND:
            raise UserError(f"{self.name!r} is a {info.kind} tree, not a conversation memory")

    def _load(self) -> TopicTree:
        s = self.kt.settings
        if not self.exists:
            return TopicTree(
                self.name, {}, None, {}, max_children=s.max_children, summarize=s.summaries != "none"
            )
        self._check_kind()
        settings = self.kt.store.tree_settings(self.name)
        return TopicTree(
            self.name,
            self.kt.store.load_nodes(self.name),
            self.kt.store.root_id(self.name),
            dict(settings.get("memory_state") or {}),  # type: ignore[arg-type]
            max_children=int(settings.get("max_children") or s.max_children),  # type: ignore[arg-type]
            summarize=s.summaries != "none",
        )

    def messages(self, start: int = 1, end: int | None = None) -> list[dict[str, object]]:
        """Stored messages with positions start..end (1-based, inclusive), verbatim."""
        self._check_kind()
        return self.kt.store.load_messages(self.name, start, None if end is None else end + 1)

    # -- adding --------------------------------------------------------------------------------
    def add(
        self,
        messages: Sequence[ChatMessage | dict[str, Any]],
        *,
        batch_size: int | None = None,
        progress: Progress | None = None,
        on_client: Callable[[Any], None] | None = None,
        skipped: int = 0,
    ) -> AddReport:
        """Add messages (one exchange or many) to the memory; returns what it cost. A message whose add
        key (`ChatMessage.key`, set by the server) the memory holds already, or a second one with the
        same key, is skipped: a retried or resumed add stores each message once (keys are saved with
        their messages, in one transaction). Adders of one memory in several processes take turns
        (`Store.hold_tree`: each reads the state the previous one wrote)."""
        with self.kt.store.hold_tree(self.name):
            return self._add(
                messages, batch_size=batch_size, progress=progress, on_client=on_client, skipped=skipped
            )

    def _add(
        self,
        messages: Sequence[ChatMessage | dict[str, Any]],
        *,
        batch_size: int | None,
        progress: Progress | None,
        on_client: Callable[[Any], None] | None,
        skipped: int,
    ) -> AddReport:
        started = time.monotonic()
        msgs = parse_messages(messages)
        if any(m.key is not None for m in msgs):
            held = self.kt.store.stored_add_keys(self.name, [m.key for m in msgs if m.key]) if self.exists else set()
            kept = unseen(msgs, held)
            if progress is not None and len(kept) < len(msgs):  # done/total of the whole request
                progress = shifted(progress, len(msgs) - len(kept))
            skipped, msgs = skipped + len(msgs) - len(kept), kept
        tree = self._load()
        model = self.kt.model
        settings = {"max_children": tree.max_children, "batch_size": batch_size}

        def save(step: StepResult) -> None:
            assert tree.root_id is not None
            self.kt.store.save_memory_step(
                self.name,
                root_id=tree.root_id,
                nodes=list(step.changed.values()),
                parents={nid: tree.parent[nid] for nid in step.changed if nid in tree.parent},
                removed=sorted(step.removed),
                messages=step.messages,
                model=model.id,
                settings={**settings, "memory_state": tree.state()},
                kind=KIND,
            )

        batches = 0
        with self.kt.run("add", self.name, f"{len(msgs)} message(s)") as run:
            client = run.client
            assert client is not None
            if on_client:
                on_client(client)
            if msgs:
                batches = tree.add(msgs, client, batch_size=batch_size, on_step=save, progress=progress)
        return AddReport(
            memory=self.name,
            added=len(msgs),
            skipped=skipped,
            messages=tree.stored,
            nodes=len(tree.nodes),
            depth=tree.depth(),
            batches=batches,
            usage=client.usage.model_copy(),
            seconds=time.monotonic() - started,
            fallbacks=tree.fallbacks,
        )

    def add_file(
        self,
        path: str | Path,
        *,
        fmt: str = "auto",
        conversation: str | None = None,
        batch_size: int | None = None,
        progress: Progress | None = None,
        on_client: Callable[[Any], None] | None = None,
    ) -> AddReport:
        """Import a chat file. Messages already stored as the file's beginning are skipped, so running
        the same import again resumes an interrupted one instead of adding duplicates."""
        msgs = load_chat(path, fmt=fmt, conversation=conversation)
        skip = 0
        if self.exists:
            self._check_kind()
            stored = self.kt.store.load_messages(self.name)
            given = self._load().count  # the highest position given out (deleted messages included)
            if (
                stored
                and given <= len(msgs)
                and all(_same(row, msgs[int(row["position"]) - 1]) for row in stored)  # type: ignore[call-overload]
            ):
                skip = given  # by position: a message deleted since is not imported again
        if skip == len(msgs):  # nothing new: not an error, and nothing is recorded
            tree = self._load()
            return AddReport(
                memory=self.name,
                added=0,
                skipped=skip,
                messages=tree.stored,
                nodes=len(tree.nodes),
                depth=tree.depth(),
                batches=0,
                usage=Usage(),
                seconds=0.0,
            )
        return self.add(
            msgs[skip:], batch_size=batch_size, progress=progress, on_client=on_client, skipped=skip
        )

    # -- forgetting ----------------------------------------------------------------------------
    def delete_message(self, position: int) -> DeleteReport:
        """Delete the message at `position` and nothing else the user stored: its row and its leaf
        (with its full-text and tree-index entries) go; no other message moves, so citations to
        them stay valid, and the position is never given out again. The topic it sat under keeps
        its place, and the summaries that described it are written again from what is left (the
        topic call for its topic, merge calls for the ancestors: O(depth) calls, cached like an
        `add`'s; see `knowtree.construct.forget`). NotFoundError when there is no such message."""
        with self.kt.store.hold_tree(self.name):
            return self._delete_message(position)

    def _delete_message(self, position: int) -> DeleteReport:
        started = time.monotonic()
        self._check_kind()
        rows = self.kt.store.load_messages(self.name)
        target = next((r for r in rows if r["position"] == position), None)
        if target is None:
            raise NotFoundError(f"memory {self.name!r} has no message at position {position}")
        tree = self._load()
        settings = dict(self.kt.store.tree_settings(self.name))
        left = [r for r in rows if r["position"] != position]
        step = StepResult()
        with self.kt.run("delete", self.name, f"message {position}") as run:
            client = run.client
            assert client is not None
            refreshed = tree.forget(str(target["node_id"]), left, client, step)
            assert tree.root_id is not None
            self.kt.store.save_memory_step(
                self.name,
                root_id=tree.root_id,
                nodes=list(step.changed.values()),
                parents={nid: tree.parent[nid] for nid in step.changed if nid in tree.parent},
                removed=sorted(step.removed),
                forgotten=[position],
                model=self.kt.store.tree_info(self.name).model,
                settings={**settings, "memory_state": tree.state()},
                kind=KIND,
            )
        _drop_index_entries(self.kt.store, self.name)
        return DeleteReport(
            memory=self.name,
            position=position,
            removed=sorted(step.removed),
            refreshed=refreshed,
            messages=tree.stored,
            usage=client.usage.model_copy(),
            seconds=time.monotonic() - started,
        )

    # -- reading -------------------------------------------------------------------------------
    def _navigator(
        self,
        on_step: Callable[[NavStep], None] | None,
        options: MemoryOptions,
        on_token: Callable[[str], None] | None = None,
    ) -> MemoryNavigator:
        self._check_kind()
        nodes = self.kt.store.load_nodes(self.name)
        root = self.kt.store.root_id(self.name)
        rows = {int(r["position"]): r for r in self.kt.store.load_messages(self.name)}  # type: ignore[call-overload]
        embedder = self.embedder
        if isinstance(embedder, str):
            from knowtree.errors import ConfigError
            from knowtree.retrieve.embed import get_embedder

            try:
                embedder = get_embedder(embedder)
            except ConfigError:
                embedder = None
        scorer = HybridScorer(nodes, None, embedder)
        return MemoryNavigator(
            self.name,
            nodes,
            root,
            None,
            options=options,
            scorer=scorer,
            messages=rows,
            on_step=on_step,
            on_token=on_token,
        )

    def _reader(self, evidence: Sequence[Evidence], budget_tokens: int) -> MemoryNavigator:
        """A navigator over just the messages `evidence` holds (and the root): what reading the
        index's evidence needs, without loading every node and message of a long memory (at 10k
        messages that loading was half of `context`'s time)."""
        from knowtree.answer.indexed import evidence_node_ids

        store = self.kt.store
        root = store.root_id(self.name)
        nodes = store.load_nodes(self.name, [root, *evidence_node_ids(evidence)])
        runs: list[list[int]] = []  # the messages' positions as [start, end) runs, one query each
        for p in sorted({n.spans[0].line_start for n in nodes.values() if n.is_leaf and n.spans}):
            if runs and runs[-1][1] == p:
                runs[-1][1] = p + 1
            else:
                runs.append([p, p + 1])
        rows = {int(r["position"]): r for a, b in runs for r in store.load_messages(self.name, a, b)}  # type: ignore[call-overload]
        options = MemoryOptions(budget_tokens=budget_tokens)
        return MemoryNavigator(self.name, nodes, root, None, options=options, messages=rows)

    def ask(
        self,
        question: str,
        *,
        mode: str | None = None,
        navigator: Navigator | None = None,
        budget_tokens: int | None = None,
        max_steps: int = 8,
        on_step: Callable[[NavStep], None] | None = None,
        on_token: Callable[[str], None] | None = None,
    ) -> Answer:
        """Answer from the memory with message-level citations.

        `mode` means what it means for `Tree.ask` (auto | walk | search | retrieve | nav; default:
        the `ask_mode` setting; see `knowtree.answer.router`): auto and retrieve read the memory
        through its index, nav through its index and a judged beam; walk, or naming a `navigator`
        (tree or agent: the tool-using agent), walks it. The old spelling `mode="tree"` /
        `mode="agent"` still names the navigator. `on_step` gets each navigation step as it happens;
        `on_token` the answer's text as the model writes it (before the answer is checked: the
        returned Answer is what counts)."""
        if mode in ("tree", "agent") and navigator is None:  # the old vocabulary
            navigator, mode = mode, None  # type: ignore[assignment]
        self._check_kind()
        plan = route(KIND, mode, default_mode=self.kt.settings.ask_mode, navigator=navigator)
        if plan.route != "memory":  # nav: the memory as an index, like any tree
            return self.kt.tree(self.name).run_plan(
                plan, question, budget_tokens=budget_tokens, on_step=on_step
            )
        options = MemoryOptions(budget_tokens=budget_tokens or MemoryOptions.budget_tokens)
        nav = self._navigator(on_step, options, on_token)
        with self.kt.run("ask", self.name, question) as run:
            nav.client = run.client
            if plan.navigator == "index":
                judged = plan.mode == "nav"
                answer = self._ask_indexed(
                    nav, question, options.budget_tokens, judged=judged, on_step=on_step
                )
            elif plan.navigator == "agent":
                from knowtree.answer.agent import MemoryAgent

                answer = MemoryAgent(nav, max_steps=max_steps).ask(question)
            else:
                answer = nav.ask(question)
            run.status = answer.status
        return answer

    def _ask_indexed(
        self,
        nav: MemoryNavigator,
        question: str,
        budget: int,
        *,
        judged: bool = False,
        on_step: Callable[[NavStep], None] | None = None,
    ) -> Answer:
        """The memory as an index (`--mode retrieve`): the index's evidence (no model call) and one
        memory answer call over those messages. `judged` (`--mode nav`): the index's ranking is first
        graded by the judged beam (`answer/nav.py`, one call by default), as on any tree, and the
        memory answer step reads what it packs; the judge's steps lead the trace. The question is not
        split into parts, as the navigator does not split it: chat questions name people ("Mel and
        her husband"), which the split's rule takes for two questions (LoCoMo: a call more and a
        worse answer)."""
        found, texts, beam = self._evidence(question, budget, nav if judged else None, on_step)
        answer = nav.answer_evidence(question, found, texts, judged=beam is not None)
        if beam is not None:
            answer.trace = [*beam.steps, *answer.trace]
            answer.usage.add(beam.usage)  # the judge's calls and tokens beside the answer's
        return answer

    def _evidence(
        self,
        question: str,
        budget: int,
        judge: MemoryNavigator | None = None,
        on_step: Callable[[NavStep], None] | None = None,
    ) -> tuple[list[Any], dict[str, str], Any]:
        """The index's evidence for `question` within `budget` (`judge`: its ranking graded first by
        the judged beam with that navigator's client), the packed pieces' index texts (to place a long
        message's pieces) and the beam (None unjudged)."""
        from knowtree.answer.nav import judged_beam
        from knowtree.retrieve.treesearch import search_index

        rerank = None
        if judge is not None:
            assert judge.client is not None
            rerank = judged_beam(judge.client, question, on_step=on_step, budget_tokens=budget)
        index = self.kt.tree_index(self.name)
        found = search_index(index, question, budget, kind=KIND, embedder=self.embedder, rerank=rerank)
        return found.evidence, found.texts(), found.reranked

    def context(
        self, question: str, budget_tokens: int = 1000, *, use_model: bool = False
    ) -> list[dict[str, Any]]:
        """The raw messages (position, speaker, role, content, timestamp, source id) the memory's index
        finds for `question` (`Tree.retrieve`'s core, no model call; each message with its evidence
        item's score), within `budget_tokens`, in time order: what `ask(mode="retrieve")` reads, for an
        application's own prompt. A long message is read in stretches: its `content` is then the
        stretches read, joined by " … ", and `passages` their [start, end) character ranges in the
        message. `use_model=True`: the messages a walk of the topic tree selects (model calls; what
        `ask(mode="walk")` reads)."""
        from knowtree.answer.indexed import item_leaves

        scores: dict[str, float] = {}
        if use_model:
            nav = self._navigator(None, MemoryOptions(budget_tokens=budget_tokens))
            with self.kt.run("context", self.name, question) as run:  # closed "failed" if retrieval raises
                nav.client = run.client
                r = nav.retrieve(question, budget_tokens)
            self.last_retrieval = r  # what it cost and where each message came from (benchmarks read it)
        else:
            self._check_kind()
            evidence, texts, _ = self._evidence(question, budget_tokens)
            nav = self._reader(evidence, budget_tokens)
            r = nav.read_evidence(evidence, texts)  # what the memory answer step reads
            for ev in evidence:
                for leaf in item_leaves(ev, nav.nodes):
                    scores.setdefault(leaf.id, ev.score)
        out = []
        for leaf, p in sorted(((m, nav._pos(m)) for m in r.messages), key=lambda x: x[1]):
            row: dict[str, Any] = {**nav.rows.get(p, {}), "position": p, "via": r.origin.get(leaf, "tree")}
            if leaf in scores:
                row["score"] = scores[leaf]
            pieces = r.passages.get(leaf, [])
            if pieces and not all(x.whole for x in pieces):  # a long message: the passages read
                row["content"] = " … ".join(x.text for x in pieces)
                row["passages"] = [{"start": x.start, "end": x.end} for x in pieces]
            out.append(row)
        return out

    async def stream(
        self,
        question: str,
        *,
        mode: str | None = None,
        navigator: Navigator | None = None,
        budget_tokens: int | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield {"event": "step", "step": NavStep} as navigation happens, {"event": "token", "text": ...}
        as the model writes the answer, then {"event": "answer", "answer": Answer} (the checked answer,
        with citations). `mode`, `navigator`, `budget_tokens`: as for `ask` (the same plan runs). The
        agent navigator and the index modes stream their steps; their answer text comes as one token event."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

        def on_step(step: NavStep) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, ("step", step))

        def on_token(text: str) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, ("token", text))

        def run() -> None:
            try:
                answer = self.ask(
                    question,
                    mode=mode,
                    navigator=navigator,
                    budget_tokens=budget_tokens,
                    on_step=on_step,
                    on_token=on_token,
                )
                loop.call_soon_threadsafe(queue.put_nowait, ("done", answer))
            except BaseException as exc:  # re-raised in the consumer
                loop.call_soon_threadsafe(queue.put_nowait, ("error", exc))

        worker = loop.run_in_executor(None, run)
        streamed = False
        try:
            while True:
                kind, value = await queue.get()
                if kind == "step":
                    yield {"event": "step", "step": value}
                elif kind == "token":
                    streamed = True
                    yield {"event": "token", "text": value}
                elif kind == "error":
                    raise value
                else:
                    answer: Answer = value
                    if not streamed and answer.answer:  # agent mode, or an answer from no streamed call
                        yield {"event": "token", "text": answer.answer}
                    yield {"event": "answer", "answer": answer}
                    break
        finally:
            await worker


def _drop_index_entries(store: Any, name: str) -> None:
    """A memory's tree index, if it was built, is brought up to date now (the deleted message's
    entries and vectors go) rather than at its next search."""
    write = getattr(store, "write", None)
    if write is None or not store.query("SELECT 1 FROM tree_index_state WHERE tree = ?", (name,)):
        return
    from knowtree.retrieve.treeindex import sync_entries

    write(lambda c: sync_entries(c, name))


def _same(row: dict[str, object], m: ChatMessage) -> bool:
    return row["role"] == m.role and row["content"] == m.content and (row["name"] or None) == m.name


def leaves_in_order(nodes: dict[str, Node]) -> list[Node]:
    return sorted((n for n in nodes.values() if n.is_leaf), key=lambda n: n.spans[0].line_start)
