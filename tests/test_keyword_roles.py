"""The keyword model picks its role from the reply schema a request asks for (its property names),
not from the prompt's wording: a template can be reworded without breaking the fake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import knowtree
from knowtree.llm.base import Message, Request
from knowtree.testing.models import (
    ROLES_BY_FIELDS,
    ROLES_BY_NUMBERED_FIELDS,
    ROLES_WITH_OPEN_FIELDS,
    FunctionModel,
    KeywordModel,
    role_for,
)

SAMPLES = Path(knowtree.__file__).parent / "samples" / "lighthouse"
QUESTION = "Who is the product lead among the kick-off attendees, and who runs support operations?"


def reworded(request: Request) -> Request:
    """The same request from a reworded template: another opening instruction, and no schema name
    where the reply's property names alone say the role."""
    *head, last = request.messages
    first, _, rest = last.content.partition("\n")
    opening = "Here is some work for you; take care with it." + (
        "\n" + first if first.startswith("Question:") else ""
    )
    roles = ROLES_BY_FIELDS.get(frozenset((request.schema_ or {}).get("properties") or ()))
    shared = isinstance(roles, tuple) or request.schema_name in ROLES_WITH_OPEN_FIELDS
    return request.model_copy(
        update={
            "messages": [*head, Message(role=last.role, content=opening + "\n" + rest)],
            "schema_name": request.schema_name if shared else "reply",
        }
    )


def recording(seen: list[Request], change: Any = None) -> FunctionModel:
    keyword = KeywordModel()

    def reply(request: Request) -> Any:
        seen.append(request)
        return keyword.reply(change(request) if change else request)

    return FunctionModel(reply, id="keyword")


TOPICS = ("garden", "boat", "kitchen")


def chat() -> list[dict[str, str]]:
    said = []
    for i in range(30):
        topic, stamp = TOPICS[(i // 6) % 3], f"10:{i:02d} am on {1 + i // 10} May, 2023"
        said.append(
            {
                "role": "user",
                "name": "Ann",
                "content": f"Message {i} about my {topic} plans.",
                "timestamp": stamp,
            }
        )
        said.append({"role": "assistant", "content": f"Tell me more about the {topic}.", "timestamp": stamp})
    said.append(
        {
            "role": "user",
            "name": "Ann",
            "content": "My sister Beth moved to Lisbon for her job.",
            "timestamp": "9 May 2023",
        }
    )
    return said


def build_and_ask(db: Path, model: FunctionModel, kind: str) -> knowtree.Answer:
    with knowtree.open(db, model=model) as kt:
        if kind == "documents":
            kt.build([str(SAMPLES)], tree="t")
            return kt.tree("t").ask(QUESTION, mode="walk")  # the walk: the roles below
        memory = kt.memory("chat")
        memory.embedder = "hash"
        memory.add(chat())
        return memory.ask("Where did Ann's sister Beth move for her job?", mode="walk")  # the walk: memory_choose too


ROLES_SEEN = {
    "documents": {"leaf_meta", "branch_meta", "decompose", "choose", "read", "combine"},
    "chat": {"topic", "topic_merge", "memory_choose", "memory_answer"},
}


@pytest.mark.parametrize("kind", ["documents", "chat"])
def test_a_reworded_template_plays_the_same_role(tmp_path: Path, kind: str) -> None:
    seen: list[Request] = []
    plain = build_and_ask(tmp_path / "a.db", recording(seen), kind)
    assert ROLES_SEEN[kind] <= {r.schema_name for r in seen}
    keyword = KeywordModel()
    for request in {r.schema_name: r for r in seen}.values():
        assert role_for(reworded(request)) == request.schema_name
        assert keyword.reply(reworded(request)) == keyword.reply(request), request.schema_name
    # end to end: every prompt reworded, the same answer
    again = build_and_ask(tmp_path / "b.db", recording([], reworded), kind)
    assert (again.status, again.answer) == (plain.status, plain.answer)
    assert plain.status == "complete"


def test_every_role_in_the_table_has_a_player() -> None:
    roles = [r for v in ROLES_BY_FIELDS.values() for r in ((v,) if isinstance(v, str) else v)]
    roles += [r for _, v in ROLES_BY_NUMBERED_FIELDS for r in ((v,) if isinstance(v, str) else v)]
    roles += list(ROLES_WITH_OPEN_FIELDS)
    assert len(roles) == len(set(roles)) == 29
    assert all(callable(getattr(KeywordModel, f"_{r}", None)) for r in roles)


def ask(properties: list[str], name: str = "reply") -> Request:
    schema = {"type": "object", "properties": {p: {} for p in properties}, "required": properties}
    return Request(messages=[Message(role="user", content="x")], schema=schema, schema_name=name)


def test_numbered_and_shared_replies() -> None:
    assert role_for(ask(["part_1", "part_2"])) == "read"
    assert role_for(ask(["issue_1"])) == "kb_theme_assign"
    assert role_for(ask(["1", "2", "3"])) == "nav_judge"
    assert role_for(ask(["1", "2"], "kb_compliance")) == "kb_compliance"  # numbered, told apart by name
    assert role_for(ask(["choice", "reason"], "memory_choose")) == "memory_choose"
    assert role_for(ask(["platform", "topic"], "kb_query_meta")) == "kb_query_meta"
    assert role_for(Request(messages=[], schema_name="branch_meta")) == "branch_meta"  # no schema


@pytest.mark.parametrize(
    ("properties", "name"),
    [(["choice", "reason"], "reply"), (["colour"], "reply"), (["answer"], "leaf_meta")],
)
def test_an_unknown_reply_is_refused_by_its_fields(properties: list[str], name: str) -> None:
    with pytest.raises(ValueError, match="KeywordModel knows no role") as err:
        KeywordModel().reply(ask(properties, name))
    assert str(sorted(properties)) in str(err.value)


def test_kb_theme_names_do_not_change_with_the_hash_seed() -> None:
    """The theme names (and so their numbers, which the theme assignment answers with) are the same in
    every process: a KB built by one process and one built by several (Ray) must agree."""
    import os
    import subprocess
    import sys

    script = (
        "from knowtree.testing.models import KeywordModel\n"
        "issues = [f'- my {d} phone {f} issue' for d in ('alpha', 'beta', 'gamma') for f in ('red', 'blue', 'green')]\n"
        "print(KeywordModel()._kb_themes('Issues\\n' + '\\n'.join(issues), None))\n"
    )
    src = str(Path(knowtree.__file__).parents[1])
    said = {
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60,
            env={**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": src},
        ).stdout
        for seed in range(6)
    }
    assert len(said) == 1, said
