"""How a question runs, decided in one place: tree kind × mode × navigator → a `Plan`.

Pure: no store, no model. The facades (`Tree.ask`, `Memory.ask`, and through them the CLI, the
server and streaming) call `route` and execute the plan it returns.

| mode            | document tree                                   | conversation memory            |
|-----------------|-------------------------------------------------|--------------------------------|
| auto (default)  | chunk tree: retrieve; structured: documents picked (a collection), each retrieved, or searched when expert notes match | as retrieve; a named navigator walks |
| walk            | the walker (structured trees: with expert notes) | the memory navigator (tree walk) |
| search          | tree search (one call over the outline)          | the memory navigator          |
| retrieve        | the tree as an index, one answer call            | the index's messages, the memory answer step |
| nav             | index scores, a judged beam, one answer call     | the index's messages, judged, the memory answer step |

`mode=None` means the `ask_mode` setting (auto when a navigator is named). `navigator` (tree | agent)
picks the memory navigator: the tree walk or the tool-using agent; memories only, in the modes above
that use it. A memory in retrieve or nav mode runs with `Plan.navigator` "index" (not a user's choice).
`strategy` (auto | describe | metadata | semantic) is how a collection picks its documents.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from knowtree.config import AskMode, CollectionStrategy
from knowtree.errors import ConfigError

MODES: tuple[str, ...] = get_args(AskMode)  # auto, walk, search, retrieve, nav
STRATEGIES: tuple[str, ...] = get_args(CollectionStrategy)
NAVIGATORS = ("tree", "agent")
CONVERSATION = "conversation"

Route = Literal["walk", "structured", "memory", "retrieve", "nav"]


@dataclass(frozen=True, slots=True)
class Plan:
    """What runs: `route`, with the mode it runs in (`structured`: auto | walk | search, decided per
    document later), the memory navigator (`memory`) and the collection strategy."""

    route: Route
    mode: str
    navigator: str = "tree"
    strategy: str | None = None


def check_choice(mode: str | None, strategy: str | None = None, navigator: str | None = None) -> None:
    if mode is not None and mode not in MODES:
        raise ConfigError(f"unknown ask mode {mode!r} (known: {', '.join(MODES)})")
    if strategy is not None and strategy not in STRATEGIES:
        raise ConfigError(f"unknown collection strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    if navigator is not None and navigator not in NAVIGATORS:
        raise ConfigError(f"unknown memory navigator {navigator!r} (known: {', '.join(NAVIGATORS)})")


def route(
    kind: str,
    mode: str | None,
    *,
    default_mode: str = "auto",
    strategy: str | None = None,
    navigator: str | None = None,
    structured: bool | Callable[[], bool] = False,
) -> Plan:
    """The plan for one question. `default_mode`: the `ask_mode` setting; `structured`: whether the
    tree was built from its documents' structure (titled sections), or a function telling it (only
    called when it matters, so routing a memory loads no nodes)."""
    check_choice(mode, strategy, navigator)
    check_choice(default_mode)
    chosen = mode or ("auto" if navigator else default_mode)  # naming a navigator: the mode that uses it
    if navigator == "agent" and (kind != CONVERSATION or chosen in ("retrieve", "nav")):
        where = "a document tree" if kind != CONVERSATION else f"mode {chosen!r}"
        raise ConfigError(
            f"the agent navigator answers conversation memories in walk or auto mode, not {where}"
        )
    if kind == CONVERSATION and (chosen in ("retrieve", "nav") or (chosen == "auto" and navigator is None)):
        # the index finds the messages, the memory's own answer step reads them (message numbers,
        # a later message winning over an earlier one, streaming): on LoCoMo, as many or more
        # answers right as the navigator's walk, in one call instead of 3-6 (benchmarks/RESULTS.md,
        # "Memories: the index, read by the memory answer step"); nav judges the index's ranking
        # first, as on any tree, and the same memory answer step reads what it packs
        return Plan("memory", chosen, navigator="index")
    if chosen in ("retrieve", "nav"):  # document trees of every kind
        return Plan(chosen, chosen, strategy=strategy)
    if kind == CONVERSATION:  # a memory: answered by its own navigator
        return Plan("memory", chosen, navigator=navigator or "tree")
    is_structured = structured() if callable(structured) else structured
    if is_structured or chosen == "search":
        return Plan("structured", chosen, strategy=strategy)
    if chosen == "auto":
        # a chunk tree: its index finds the evidence and one call per part answers. On the same 9
        # QuALITY questions the walk got 5 right in a median 351 s (8.4 calls), retrieve 7 in 47 s
        # (benchmarks/RESULTS.md, "Default mode").
        return Plan("retrieve", "retrieve", strategy=strategy)
    return Plan("walk", chosen)


def pick_mode(
    mode: str, structured: bool, outline_tokens: int, context_window: int, *, navigate: bool = False
) -> str:
    """Within a structured plan, per document: auto reads the document through the tree's index
    (`retrieve`: 11 of 14 FinanceBench evidence pages vs 1 for tree search, benchmarks/RESULTS.md
    "Section trees of PDFs"), unless the model should navigate (`navigate`: expert notes match the
    question, which only tree search and the walk read, or there is no index): then it searches an
    outline that fits in half the model's context window, and walks otherwise (and always walks a
    tree without titles)."""
    check_choice(mode)
    if mode in ("walk", "search"):
        return mode
    if not navigate:
        return "retrieve"
    if not structured:
        return "walk"
    return "search" if outline_tokens <= context_window // 2 else "walk"
