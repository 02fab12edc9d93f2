"""The model side of an evaluation run: one knowtree database (LLM cache, ledger, trees) and one model.

Every LLM method of a run shares it, so all of them use the same model and the same cache: a rerun
(or a resumed run) answers finished calls from the cache, and each question's calls are one ledger
run whose id becomes the record's `trace_id` (`knowtree ledger --db DB` shows it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from knowtree_eval import prompts

if TYPE_CHECKING:
    from knowtree.core import KnowTree
    from knowtree.llm.client import LLMClient


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


def answer_from_text(client: LLMClient, question: str, text: str) -> str:
    """One call: the question answered from `text` alone (the reader every retrieval method shares)."""
    messages = prompts.messages("eval_answer", text=text, question=question)
    result = client.structured(messages, AnswerReply, schema=ANSWER_SCHEMA, purpose="answer", max_tokens=200)
    return result.value.answer.strip()
