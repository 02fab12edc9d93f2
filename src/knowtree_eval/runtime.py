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
from knowtree_eval.datasets.base import question_prompt
from knowtree_eval.metrics import extract_choice

if TYPE_CHECKING:
    from knowtree.core import KnowTree
    from knowtree.llm.base import TokenLogprob
    from knowtree.llm.client import LLMClient
    from knowtree_eval.datasets import Case


#: the harness's reader of multiple-choice questions (`knowtree eval --choice-reads`): two readings,
#: the options rotated by half between them (benchmarks/RESULTS.md, "QuALITY: two readings of each question")
CHOICE_READS = 2


@dataclass
class Runtime:
    """`model` is a model string ("local", "openai:…", "keyword"…; None: the configured default)."""

    db: str
    model: str | None = None
    model_object: Any = None  # a Model instance (tests pass a scripted one); wins over `model`
    judge: str | None = None  # judge model string; "same" = the run's model
    judge_object: Any = None
    #: multiple choice: how many times the reader reads each question, its options rotated (`read_answer`)
    choice_reads: int = CHOICE_READS
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


def read_answer(
    client: LLMClient, case: Case, text: str, reads: int = 1
) -> tuple[str, dict[str, float] | None, list[dict[str, float]] | None]:
    """`case` (its question as a model sees it) answered from `text` alone, the reader every method
    that answers shares: (the answer, the probability of each option letter, each reading's
    probabilities), the last two None for a free-form question or where the backend reports no
    log-probabilities.

    One call, unless a multiple-choice question is read `reads` > 1 times: then reading i shows the
    options rotated by i·n/reads places (with two readings and four options, A B C D and C D A B),
    each reading's letter probabilities are mapped back to the options, and the answer is the option
    with the highest mean probability. A small reader leans towards some letters whatever the text
    says (the 1.5B model: away from A, towards C); an option shown at several places is judged on
    its content more than on its place (the cyclic permutations of Zheng et al. 2024, "Large
    Language Models Are Not Robust Multiple Choice Selectors"). The readings share the text, so a
    backend reusing the prompt's prefix (llama.cpp) re-reads only the question. Without log-
    probabilities a second reading could only vote, and two votes cannot break a tie: the first
    reading's answer stands and no more are made."""
    options = list(case.options or [])
    prediction, probs = _read_once(client, case.question, options, text)
    if not options or probs is None:
        return prediction, probs, None
    n = len(options)
    count = max(1, min(reads, n))  # more readings than places would repeat one
    readings = [probs]
    for i in range(1, count):
        shift = i * n // count
        rotated = options[shift:] + options[:shift]
        _, shown = _read_once(client, case.question, rotated, text)
        if shown is not None:  # letter j of this reading is option (j + shift) mod n
            readings.append({_letter((j + shift) % n): shown[_letter(j)] for j in range(n)})
    if len(readings) == 1:
        return prediction, probs, None
    mean = {k: sum(r[k] for r in readings) / len(readings) for k in probs}
    best = max(mean, key=lambda k: mean[k])
    if extract_choice(prediction, options) != best:  # the first reading chose another option
        prediction = f"({best}) {options[ord(best) - 65]}"
    return prediction, mean, readings


def _letter(i: int) -> str:
    return chr(65 + i)


def _read_once(
    client: LLMClient, question: str, options: list[str], text: str
) -> tuple[str, dict[str, float] | None]:
    """One answer call over `text`, the question shown with `options` lettered in this order."""
    messages = prompts.messages("eval_answer", text=text, question=question_prompt(question, options))
    result = client.structured(
        messages,
        AnswerReply,
        schema=ANSWER_SCHEMA,
        purpose="answer",
        max_tokens=200,
        logprobs=LETTER_ALTERNATIVES if options else 0,
    )
    probs = letter_probs(result.logprobs, len(options)) if options and result.logprobs else None
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
