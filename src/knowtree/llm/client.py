"""Every model call goes through `LLMClient`: cache, concurrency limit, retries, validation, ledger.

The adapters in this package only talk to a provider. This module adds, once for all of them:

* a content-addressed cache (the request's hash, including the model id) kept in the database, so a
  rebuild or a resumed build repeats no finished call;
* a global concurrency limit (a semaphore shared by every thread using the client);
* retries with exponential backoff and jitter that honour Retry-After (via `tenacity`: a maintained
  library; only the wait function that reads Retry-After is ours);
* structured output: the JSON schema goes to the backend for constrained decoding, then the reply is
  parsed tolerantly (`json_repair` for broken JSON instead of hand-written string surgery), validated
  with pydantic plus an optional semantic check, and, when it still fails, asked again with the error
  fed back, a bounded number of times. A reply that never validates raises `ModelOutputError`;
* a ledger: every call (cached or not) is recorded with tokens, latency, cost and error;
* typed failures: a model's own exception that is not a `KnowtreeError` becomes `ModelCallError`
  naming the model (an `AssertionError`, a test's guard, is left as it is).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from knowtree.errors import (
    BudgetExceededError,
    ConfigError,
    KnowtreeError,
    ModelCallError,
    ModelOutputError,
    TransientModelError,
)
from knowtree.llm.base import Completion, Message, Model, Request, TokenLogprob
from knowtree.types import Usage

if TYPE_CHECKING:
    from knowtree.config import Settings

T = TypeVar("T", bound=BaseModel)


class CallStore(Protocol):
    """What the client needs from storage (the SQLite store implements it)."""

    def cache_get(self, key: str) -> Completion | None: ...

    def cache_put(self, key: str, model_id: str, completion: Completion) -> None: ...

    def cache_delete(self, keys: list[str]) -> None: ...

    def record_call(
        self,
        *,
        run_id: str | None,
        key: str,
        model_id: str,
        purpose: str,
        cached: bool,
        usage: Usage,
        error: str | None,
    ) -> None: ...

    def put_reply(
        self, key: str, model_id: str, completion: Completion, *, run_id: str | None, purpose: str, usage: Usage
    ) -> None:
        """A fresh reply: `cache_put` and its `record_call` (not cached, no error) in one write."""
        ...


class MemoryCallStore:
    """A CallStore kept in memory: for the Python API without a database, and for tests."""

    def __init__(self) -> None:
        self.cache: dict[str, Completion] = {}
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def cache_get(self, key: str) -> Completion | None:
        return self.cache.get(key)

    def cache_put(self, key: str, model_id: str, completion: Completion) -> None:
        with self._lock:
            self.cache[key] = completion

    def cache_delete(self, keys: list[str]) -> None:
        with self._lock:
            for key in keys:
                self.cache.pop(key, None)

    def record_call(self, **kwargs: Any) -> None:
        with self._lock:
            self.calls.append(kwargs)

    def put_reply(
        self, key: str, model_id: str, completion: Completion, *, run_id: str | None, purpose: str, usage: Usage
    ) -> None:
        self.cache_put(key, model_id, completion)
        self.record_call(run_id=run_id, key=key, model_id=model_id, purpose=purpose, cached=False, usage=usage,
                         error=None)


@dataclass
class CallResult(Generic[T]):
    value: T
    usage: Usage
    cached: bool
    raw: str
    attempts: int = 1
    errors: list[str] = field(default_factory=list)  # validation errors that were repaired
    #: the valid reply's tokens with their alternatives, when asked for (`logprobs`) and reported
    logprobs: list[TokenLogprob] | None = None


@dataclass
class ClientOptions:
    max_retries: int = 4  # transient failures (429, 5xx, timeouts) per call
    repair_attempts: int = 2  # extra calls that feed a validation error back
    max_wait_s: float = 60.0
    concurrency: int = 4
    # budget caps for everything this client does (one build, one question); None: no cap
    max_calls: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    #: the caps count the whole run's calls as its ledger has them (every process that records under
    #: this client's run: the Ray tasks of one build), not only this client's own
    run_wide: bool = False


def options_from(settings: Settings) -> ClientOptions:
    """A client's options as the settings give them (retries, concurrency, budget caps)."""
    return ClientOptions(
        max_retries=settings.max_retries,
        repair_attempts=settings.repair_attempts,
        concurrency=settings.concurrency,
        max_calls=settings.max_calls,
        max_tokens=settings.max_tokens,
        max_cost=settings.max_cost,
    )


_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_json_tolerant(text: str) -> Any:
    """Parse a model's JSON reply: strict first, then without code fences, then repaired.

    Returns None when nothing JSON-like can be recovered.
    """
    text = text.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    m = _FENCE.match(text)
    if m:
        try:
            return json.loads(m.group(1))
        except json.JSONDecodeError:
            text = m.group(1)
    import json_repair  # maintained JSON repair for truncated / sloppy replies

    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        return None
    repaired = json_repair.loads(text[start:])
    return repaired if repaired not in ("", None) else None


def cost_cap_problem(model: Model, max_cost: float | None) -> str | None:
    """Why `max_cost` cannot be kept with `model`, or None. A model with no prices counts every
    call as $0, so the cap would never stop anything: refused (fail closed) rather than ignored,
    unless the model is `free` (runs on this machine)."""
    if max_cost is None or model.free or model.input_cost_per_mtok or model.output_cost_per_mtok:
        return None
    return (
        f"--max-cost ${max_cost:g} cannot be enforced: model {model.id!r} has no prices, so every call "
        "would count as $0; set its prices (KNOWTREE_INPUT_COST_PER_MTOK and KNOWTREE_OUTPUT_COST_PER_MTOK, "
        "or input_cost_per_mtok / output_cost_per_mtok in knowtree.toml), or cap with --max-tokens or --max-calls"
    )


class LLMClient:
    """Wraps one `Model` with the cache, the concurrency limit, retries, validation and the ledger.

    Raises `ConfigError` when a cost cap is asked for a model whose cost is unknown (`cost_cap_problem`)."""

    def __init__(
        self,
        model: Model,
        store: CallStore | None = None,
        options: ClientOptions | None = None,
        *,
        run_id: str | None = None,
    ) -> None:
        self.model = model
        self.store: CallStore = store if store is not None else MemoryCallStore()
        self.options = options or ClientOptions()
        problem = cost_cap_problem(model, self.options.max_cost)
        if problem is not None:
            raise ConfigError(problem)
        self.run_id = run_id
        limit = max(1, min(self.options.concurrency, model.max_concurrency))
        self.concurrency = limit
        self._sem = threading.BoundedSemaphore(limit)
        self._lock = threading.Lock()
        self.usage = Usage()  # everything this client did, cached calls included
        self._pending: dict[int, tuple[int, float]] = {}  # calls under way: (estimated tokens, cost)
        self._tickets = itertools.count()
        self.listeners: list[Callable[[Usage, bool], None]] = []

    # -- raw calls -----------------------------------------------------------------------------
    def complete(
        self, request: Request, *, purpose: str, on_text: Callable[[str], None] | None = None
    ) -> tuple[Completion, Usage, bool]:
        """One call through cache, semaphore and retries. Returns (completion, usage, cached).

        `on_text` receives the reply piece by piece as the model generates it (at once from the cache)."""
        key = request.cache_key(self.model.id)
        hit = self.store.cache_get(key)
        if hit is not None:
            if on_text is not None:
                on_text(hit.text)
            # tokens the cache saved are kept apart: a cached call costs nothing, but evaluations
            # compare what each method would cost without another's cache
            usage = Usage(
                cached=1, cached_input_tokens=hit.input_tokens, cached_output_tokens=hit.output_tokens
            )
            self._account(usage, key, purpose, cached=True, error=None)
            return hit, usage, True

        started = time.monotonic()
        error: str | None = None
        ticket = self._reserve(request)
        try:
            with self._sem:
                completion = self._call_with_retries(request, on_text)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            usage = Usage(calls=1, seconds=time.monotonic() - started)
            self._account(usage, key, purpose, cached=False, error=error, ticket=ticket)
            if isinstance(exc, KnowtreeError | AssertionError):  # typed already; a test guard stays loud
                raise
            # a custom Model's plain exception (a bug, a dropped connection) becomes a typed error
            # naming the model, so callers and the CLI report it in one line
            raise ModelCallError(f"model {self.model.id!r} failed during {purpose}: {error}") from exc
        usage = Usage(
            calls=1,
            input_tokens=completion.input_tokens,
            output_tokens=completion.output_tokens,
            seconds=time.monotonic() - started,
            cost_usd=(
                completion.input_tokens * self.model.input_cost_per_mtok
                + completion.output_tokens * self.model.output_cost_per_mtok
            )
            / 1e6,
        )
        # every reply is kept: a truncated or invalid one is followed by a different request anyway
        self._account(usage, key, purpose, cached=False, error=None, ticket=ticket, reply=completion)
        return completion, usage, False

    def _reserve(self, request: Request) -> int:
        """Check the budget caps before a model call (cache hits never count) and reserve its share,
        so concurrent calls cannot overshoot a cap together. Raises `BudgetExceededError`."""
        o = self.options
        tokens = sum(len(m.content) for m in request.messages) // 4 + 1  # the prompt, about
        cost = tokens * self.model.input_cost_per_mtok / 1e6
        capped = o.max_calls is not None or o.max_tokens is not None or o.max_cost is not None
        # the run's finished calls from every process (this client's own among them, or about to be)
        reader = getattr(self.store, "run_usage", None)  # a store with a ledger (not MemoryCallStore)
        run = reader(self.run_id) if o.run_wide and capped and self.run_id and reader else None
        with self._lock:
            own = self.usage if run is None else _larger(self.usage, run)
            pending = self._pending.values()
            calls = own.calls + len(self._pending)
            used_tokens = own.input_tokens + own.output_tokens + sum(t for t, _ in pending)
            used_cost = own.cost_usd + sum(c for _, c in pending)
            if o.max_calls is not None and calls + 1 > o.max_calls:
                raise _budget("calls", calls, o.max_calls, f"{calls} model calls made")
            if o.max_tokens is not None and used_tokens + tokens > o.max_tokens:
                raise _budget("tokens", used_tokens, o.max_tokens, f"{used_tokens:,} tokens used")
            if o.max_cost is not None and used_cost + cost > o.max_cost:
                raise _budget("cost", used_cost, o.max_cost, f"${used_cost:.4f} spent")
            ticket = next(self._tickets)
            self._pending[ticket] = (tokens, cost)
            return ticket

    def _call_with_retries(
        self, request: Request, on_text: Callable[[str], None] | None = None
    ) -> Completion:
        from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

        backoff = wait_exponential_jitter(initial=1, max=self.options.max_wait_s, jitter=1)

        def wait(state: Any) -> float:
            exc = state.outcome.exception() if state.outcome else None
            base = backoff(state)
            if isinstance(exc, TransientModelError) and exc.retry_after:
                return min(max(base, exc.retry_after), self.options.max_wait_s * 5)
            return base

        for attempt in Retrying(
            stop=stop_after_attempt(self.options.max_retries + 1),
            wait=wait,
            retry=retry_if_exception_type(TransientModelError),
            reraise=True,
        ):
            with attempt:
                if on_text is not None:
                    return self.model.complete_streaming(request, on_text)
                return self.model.complete(request)
        raise AssertionError("unreachable")  # pragma: no cover

    def _account(
        self,
        usage: Usage,
        key: str,
        purpose: str,
        *,
        cached: bool,
        error: str | None,
        ticket: int | None = None,
        reply: Completion | None = None,
    ) -> None:
        """Count a call and write its ledger row; `reply`, a fresh completion, is cached in the same
        write (one transaction, on PostgreSQL one round trip: a model call's own store time)."""
        with self._lock:
            self.usage.add(usage)
            if ticket is not None:  # the reserved share becomes real usage in one step
                self._pending.pop(ticket, None)
        if reply is not None:
            self.store.put_reply(key, self.model.id, reply, run_id=self.run_id, purpose=purpose, usage=usage)
        else:
            self.store.record_call(
                run_id=self.run_id,
                key=key,
                model_id=self.model.id,
                purpose=purpose,
                cached=cached,
                usage=usage,
                error=error,
            )
        for listener in self.listeners:
            listener(usage, cached)

    def account_remote(self, usage: Usage) -> None:
        """Count calls another process made for this client's run (a Ray task with its own client on
        the same store, which wrote their ledger rows and cache entries): totals and listeners only."""
        with self._lock:
            self.usage.add(usage)
        for listener in self.listeners:
            listener(usage, bool(usage.cached) and not usage.calls)

    # -- structured calls ----------------------------------------------------------------------
    def structured(
        self,
        messages: list[Message],
        output: type[T],
        *,
        schema: dict[str, Any],
        purpose: str,
        max_tokens: int = 512,
        check: Callable[[T], None] | None = None,
        on_text: Callable[[str], None] | None = None,
        logprobs: int = 0,
    ) -> CallResult[T]:
        """Ask for JSON matching `schema`, parse it into `output`, repair or raise.

        `check` may raise ValueError for replies that are well-formed but wrong (an option index
        out of range); the message is fed back like a schema error. `logprobs`: alternatives per
        reply token to ask for (`Request.logprobs`); the valid reply's come back in the result.
        """
        total = Usage()
        errors: list[str] = []
        convo = list(messages)
        tokens = max_tokens
        raw = ""
        cached_all = True
        keys: list[str] = []
        for attempt in range(1, self.options.repair_attempts + 2):
            request = Request(
                messages=convo, schema=schema, schema_name=purpose, max_tokens=tokens, logprobs=logprobs
            )
            keys.append(request.cache_key(self.model.id))
            # only the first attempt streams: a repair's text would repeat what was already shown
            completion, usage, cached = self.complete(
                request, purpose=purpose, on_text=on_text if attempt == 1 else None
            )
            total.add(usage)
            cached_all = cached_all and cached
            raw = completion.text
            try:
                value = self._validate(raw, output, check)
                return CallResult(value, total, cached_all, raw, attempt, errors, completion.logprobs)
            except ValueError as exc:  # ValidationError is a ValueError
                problem = _short_error(exc)
                if completion.finish_reason == "length":
                    problem = f"the reply was cut off at {tokens} tokens ({problem}); be shorter"
                    tokens = min(tokens * 2, 4096)
                errors.append(problem)
                # the conversation grows with each failed reply, so every repair is a new request
                # (a repeated identical request would be answered by the cache, not the model)
                convo = [
                    *convo,
                    Message(role="assistant", content=raw[:2000]),
                    Message(
                        role="user",
                        content=(
                            f"That reply was not valid: {problem}. "
                            "Reply again with only the JSON object, following the schema exactly."
                        ),
                    ),
                ]
        # a conversation that never validated is not worth replaying: a later run asks again
        self.store.cache_delete(keys)
        raise ModelOutputError(
            f"{purpose}: invalid reply after {self.options.repair_attempts + 1} attempts: {errors[-1]}",
            raw=raw,
            attempts=self.options.repair_attempts + 1,
            usage=total,
        )

    @staticmethod
    def _validate(raw: str, output: type[T], check: Callable[[T], None] | None) -> T:
        data = parse_json_tolerant(raw)
        if data is None:
            raise ValueError("no JSON object found in the reply" if raw.strip() else "the reply was empty")
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        value = output.model_validate(data)
        if check is not None:
            check(value)
        return value


def _larger(own: Usage, run: Usage) -> Usage:
    """The larger of this client's usage and its run's recorded usage, field by field (the ledger
    may lag this client's last call by a moment, and holds the other processes' calls)."""
    return Usage(
        calls=max(own.calls, run.calls),
        input_tokens=max(own.input_tokens, run.input_tokens),
        output_tokens=max(own.output_tokens, run.output_tokens),
        cost_usd=max(own.cost_usd, run.cost_usd),
    )


def _budget(limit: str, used: float, cap: float, done: str) -> BudgetExceededError:
    shown = f"${cap:g}" if limit == "cost" else f"{cap:,g}"
    return BudgetExceededError(
        f"budget reached: {done}, the next call would pass --max-{limit} {shown}; finished calls are "
        "cached: run the same command with a higher cap (or none) to resume",
        limit=limit,
        used=used,
        cap=cap,
    )


def _short_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors()[:3]:
            loc = ".".join(str(x) for x in err.get("loc", ())) or "reply"
            parts.append(f"{loc}: {err.get('msg')}")
        return "; ".join(parts)
    return str(exc)[:300]
