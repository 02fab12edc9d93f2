"""The model side of an evaluation run: one knowtree database (LLM cache, ledger, trees) and one model.

Every LLM method of a run shares it, so all of them use the same model and the same cache: a rerun
(or a resumed run) answers finished calls from the cache, and each question's calls are one ledger
run whose id becomes the record's `trace_id` (`knowtree ledger --db DB` shows it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from knowtree.llm.grades import alternatives_at
from knowtree_eval import prompts

if TYPE_CHECKING:
    from knowtree.core import KnowTree
    from knowtree.llm.base import TokenLogprob
    from knowtree.llm.client import LLMClient
    from knowtree_eval.datasets import Case


@dataclass
class Runtime:
    """`model` is a model string ("local", "openai:…", "keyword"…; None: the configured default)."""

    db: str
    model: str | None = None
    model_object: Any = None  # a Model instance (tests pass a scripted one); wins over `model`
    judge: str | None = None  # judge model string; "same" = the run's model
    judge_object: Any = None
    _kt: KnowTree | None = field(default=None, repr=False)
    _judge_kt: KnowTree | None = field(default=None, repr=False)

    def kt(self) -> KnowTree:
        if self._kt is None:
            from knowtree.core import KnowTree

            if self.model_object is not None:
                self._kt = KnowTree(self.db, model=self.model_object)
            elif self.model:
                self._kt = KnowTree(self.db, model=self.model)
            else:
                self._kt = KnowTree(self.db)
        return self._kt

    @property
    def model_id(self) -> str:
        return self.kt().model.id

    def judge_kt(self) -> KnowTree | None:
        if self.judge_object is None and not self.judge:
            return None
        if self.judge_object is None and self.judge == "same":
            return self.kt()
        if self._judge_kt is None:
            from knowtree.core import KnowTree

            model = self.judge_object if self.judge_object is not None else self.judge
            self._judge_kt = KnowTree(self.db, model=model)
        return self._judge_kt

    @contextmanager
    def question(self, kind: str, label: str, detail: str) -> Iterator[tuple[LLMClient, str]]:
        """A ledger run for one question's calls (`KnowTree.run`): yields (client, run id); closes the
        run "ok", or "failed" when the question raised."""
        with self.kt().run(kind, label, detail) as run:
            assert run.client is not None
            yield run.client, run.id

    def close(self) -> None:
        for kt in (self._judge_kt, self._kt):
            if kt is not None:
                kt.close()
        self._kt = self._judge_kt = None


class AnswerReply(BaseModel):  # no docstring: it would go into the schema sent
    answer: str = prompts.capped(400, min_length=1)


ANSWER_SCHEMA = prompts.reply_schema(AnswerReply)


LETTER_ALTERNATIVES = 8  # alternatives per reply token asked for when reading a multiple-choice answer
_LETTER_AT = re.compile(r'"answer"\s*:\s*"\s*\(?\s*(?=[A-Z])')


def read_answer(client: LLMClient, case: Case, text: str) -> tuple[str, dict[str, float] | None]:
    """One call: `case` (its question as a model sees it) answered from `text` alone, the reader every
    method that answers shares; for a multiple-choice question, also the probability the model gave
    each letter where it wrote its own (None when the backend reports no log-probabilities or the
    reply starts with no letter). The answer is the same call's: asking for the alternatives does
    not change what the model writes."""
    letters = len(case.options or [])
    messages = prompts.messages("eval_answer", text=text, question=case.prompt())
    result = client.structured(
        messages,
        AnswerReply,
        schema=ANSWER_SCHEMA,
        purpose="answer",
        max_tokens=200,
        logprobs=LETTER_ALTERNATIVES if letters else 0,
    )
    probs = letter_probs(result.logprobs, letters) if letters and result.logprobs else None
    return result.value.answer.strip(), probs


def letter_probs(tokens: Sequence[TokenLogprob], letters: int) -> dict[str, float] | None:
    """The model's distribution over the option letters A.. at the token where its answer's letter
    is (`{"answer": "(C) …"}`): each alternative that is one of the letters (spaces and "(" aside)
    adds its probability; normalized over the letters. None when the reply has no letter there."""
    found = next(alternatives_at(tokens, _LETTER_AT), None)
    if found is None:
        return None
    mass = dict.fromkeys((chr(65 + k) for k in range(letters)), 0.0)
    for alternative, logprob in found[1]:
        word = alternative.strip().lstrip("(").strip()
        if word in mass:
            mass[word] += math.exp(logprob)
    total = sum(mass.values())
    return {k: v / total for k, v in mass.items()} if total > 0 else None
