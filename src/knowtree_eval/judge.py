"""An LLM judge for free-form answers, with one fixed prompt kept in the repo (`prompts/judge.txt`).

Token F1 undercounts right answers phrased differently ("7 May 2023" vs "May 7, 2023") and
overcounts wrong ones that share words, so free-form datasets also get a judged accuracy. The judge
model is configurable (`--judge MODEL`, or `same` for the run's model); its calls are cached and
counted apart from the method's own calls.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from knowtree.errors import ModelOutputError
from knowtree.llm.client import LLMClient
from knowtree_eval import prompts


class Verdict(BaseModel):  # no docstring: it would go into the schema sent
    # the schema asks for both fields; validation stays lenient (no reason: "", a long one is cut)
    model_config = ConfigDict(json_schema_extra={"required": ["reason", "correct"]})

    reason: str = prompts.capped(300, "")
    correct: bool


JUDGE_SCHEMA = prompts.reply_schema(Verdict)


def judge_answer(client: LLMClient, question: str, gold: str, prediction: str | None) -> Verdict:
    """Is `prediction` a correct answer to `question` given `gold`? No answer is wrong without a call."""
    if prediction is None or not prediction.strip() or prediction.strip().lower() == "unknown":
        return Verdict(reason="no answer", correct=False)
    messages = prompts.messages("judge", question=question, gold=gold, prediction=prediction)
    try:
        result = client.structured(messages, Verdict, schema=JUDGE_SCHEMA, purpose="judge", max_tokens=160)
    except ModelOutputError as exc:  # recorded by the caller as a judge error, never as a verdict
        raise ModelOutputError(f"judge: {exc}", raw=exc.raw, attempts=exc.attempts, usage=exc.usage) from exc
    return result.value
