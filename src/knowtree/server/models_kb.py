"""Request and response models of the knowledge-base routes (`/v1/kbs`), mirroring `knowtree.kb.KB`'s
`show()`, `ask(...).to_dict()` and `export()` (what `knowtree kb show|ask|export --json` print)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from knowtree.answer.kb import PASSAGES
from knowtree.server.models import Strict

EMBEDDER = r"^(static|hash(:[0-9]{1,4})?)$"


class KBSummary(BaseModel):
    name: str
    domain: str
    model: str
    created: str
    updated: str


class KBIssueNode(BaseModel):
    id: str
    title: str
    metadata: dict[str, Any]
    status: str = Field(..., description="pending (lazy: written at the first ask) | ok | stale | ungrounded | ...")
    solution: str | None
    citations: int
    violations: list[Any]
    raw_issues: int = Field(..., description="raw issues linked to this issue")


class KBParentIssue(KBIssueNode):
    cluster_size: int
    children: list[KBIssueNode]


class KBThemeOut(BaseModel):
    id: str
    name: str
    parents: list[KBParentIssue]


class KBView(BaseModel):
    """Themes → parent issues → child issues (`knowtree kb show --json`)."""

    name: str
    domain: str
    model: str
    raw_issues: int
    chunks: int
    themes: list[KBThemeOut]


class KBAskRequest(Strict):
    query: str = Field(..., min_length=1, max_length=4000, description="the user's issue, in their words")
    k: int = Field(5, ge=1, le=50, description="semantic top-k issues checked by metadata")
    metadata: Literal["auto", "model", "keywords", "none"] = Field(
        "auto",
        description="how the query's attributes are read: a model call, keywords (no call), none, or auto"
        " (keywords where the attribute configuration gives keywords, else the model)",
    )
    solve: bool = Field(True, description="write the matched issue's solution now if it has none (lazy KBs)")
    passages: int = Field(PASSAGES, ge=0, le=50, description="document passages for the query itself, beside the solution")


class KBMatchedIssue(BaseModel):
    id: str
    kind: str
    parent: str | None
    title: str
    metadata: dict[str, Any]
    cluster: str | None
    members: int


class KBRanked(BaseModel):
    id: str
    match: str
    target: str
    score: float


class KBAnswerOut(BaseModel):
    """`knowtree kb ask --json`: the matched issue, match type, solution with its citations, trace."""

    query: str
    query_metadata: dict[str, Any]
    match: str = Field(..., description="exact | subset | mismatch-tolerant... or none (nothing matched)")
    issue: KBMatchedIssue | None
    solution: str | None
    citations: list[dict[str, Any]]
    status: str
    violations: list[dict[str, Any]] = Field(
        default_factory=list, description="the rules the solution still breaks (rule, check, detail): why it is flagged"
    )
    ranked: list[KBRanked]
    passages: list[dict[str, Any]] = Field(
        ..., description="the query's own top document passages (chunk, doc_id, source, path, text, score)"
    )
    trace: list[dict[str, Any]]


class KBExportRow(BaseModel):
    id: str
    kind: str
    parent: str | None
    theme: str
    title: str
    metadata: dict[str, Any]
    members: list[str]
    solution: str | None
    citations: list[Any]
    status: str
    compliance: list[Any]


class KBBuildRequest(Strict):
    issues: str = Field(..., min_length=1, max_length=1000, description="server-side raw issues: JSONL or CSV")
    docs: list[str] = Field(..., min_length=1, max_length=1000, description="server-side domain documents")
    attributes: str = Field(..., min_length=1, max_length=1000, description="attribute configuration (TOML/YAML)")
    rules: str = Field(..., min_length=1, max_length=1000, description="domain rules (TOML, or text)")
    solutions: Literal["eager", "lazy"] = "lazy"
    context: Literal["path", "model"] = Field("path", description="chunk context: path (no model) | model")
    threshold: float | None = Field(None, gt=0, lt=1, description="cluster similarity threshold")
    replace: bool = Field(False, description="rebuild a knowledge base that already exists")
    embedder: str | None = Field(None, pattern=EMBEDDER, description="static (default) | hash[:DIM] (tests)")


class KBAddRequest(Strict):
    issues: str | None = Field(None, min_length=1, max_length=1000, description="server-side new raw issues")
    docs: list[str] | None = Field(None, max_length=1000, description="server-side new documents")


class KBRule(BaseModel):
    """One domain rule (`knowtree kb rules NAME --json`)."""

    id: str
    text: str
    forbidden: list[str] = Field(..., description="phrases a solution must not contain (checked without the model)")
    required: list[str] = Field(..., description="phrases a solution must contain")
    append: str = Field(..., description="the mandated statement appended where a required phrase is missing")
    question: str = Field(..., description="the yes/no question the judge is asked ('yes' = broken)")
    threshold: float | None = Field(..., description="P(yes) from which the judge's answer counts as broken")
    judged: bool = Field(True, description="false: checked by its phrases only, never asked of the judge")


class KBRulesRequest(Strict):
    rules: str = Field(..., min_length=1, max_length=1000, description="server-side domain rules file (TOML, or text)")


class KBRulesOut(BaseModel):
    """The KB's rules were replaced: stored solutions are kept, marked stale, and regenerated and
    checked under the new rules the next time each is retrieved."""

    kb: str
    rules: int = Field(..., description="rules the KB now has")
    stale: int = Field(..., description="stored solutions marked stale")
