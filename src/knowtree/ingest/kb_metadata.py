"""Issue metadata against the attribute configuration: reply models whose values are constrained to
the allowed sets, keyword extraction (no model), and the comparison Algorithm 2 needs.

Each attribute's value is one allowed value or `any` (a broad issue: every value). The reply models
are built from the configuration with `pydantic.create_model` and `Literal[...]` fields, so the JSON
schema sent to the backend carries an `enum` per attribute and the embedded model's grammar cannot
produce a value outside the set; validation rejects one from any other backend.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from knowtree.ingest.kb_inputs import ANY, AttributeConfig

_WORD = re.compile(r"[a-z0-9]+(?:[.'][a-z0-9]+)*")  # hyphens split: "Smart-Remote" names "remote"


def metadata_model(config: AttributeConfig, *, name: str = "IssueMetadata") -> type[BaseModel]:
    """{attribute: Literal[values..., "any"]} for every attribute of the configuration."""
    fields: dict[str, Any] = {
        a.name: (Literal[tuple([*a.values, ANY])], Field(description=a.description or a.name))  # type: ignore[misc]
        for a in config.attributes
    }
    return create_model(name, __config__=ConfigDict(extra="ignore"), **fields)


def variants_model(config: AttributeConfig) -> type[BaseModel]:
    """{attribute: [values...]}: the values child issues take, per attribute (no maxItems: the
    embedded engine's grammar repeats rules per item; the subtree keeps at most MAX_CHILDREN)."""
    fields: dict[str, Any] = {
        a.name: (list[Literal[tuple(a.values)]], Field(default_factory=list))  # type: ignore[misc]
        for a in config.attributes
    }
    return create_model("IssueVariants", __config__=ConfigDict(extra="ignore"), **fields)


def normalize(meta: dict[str, Any], config: AttributeConfig) -> dict[str, str]:
    """Every attribute present, unknown or missing values as `any`."""
    out = {}
    for a in config.attributes:
        v = meta.get(a.name, ANY)
        out[a.name] = v if isinstance(v, str) and v in a.values else ANY
    return out


def keyword_metadata(text: str, config: AttributeConfig) -> dict[str, str]:
    """Metadata by word match: a value is chosen when its name or one of its keywords appears in the
    text and no other value of the attribute does (several candidates → `any`). No model call: used
    to link raw issues to child issues and as the keyword model's extraction."""
    words = " " + " ".join(_WORD.findall(text.lower())) + " "
    out: dict[str, str] = {}
    for a in config.attributes:
        hits = []
        for value in a.values:
            cues = [value.lower().replace("_", " "), *a.keywords.get(value, [])]
            if any(f" {' '.join(_WORD.findall(c))} " in words for c in cues if _WORD.findall(c)):
                hits.append(value)
        out[a.name] = hits[0] if len(hits) == 1 else ANY
    return out


def describe(config: AttributeConfig) -> str:
    """The configuration as prompt text: one line per attribute with its allowed values."""
    lines = []
    for a in config.attributes:
        about = f" ({a.description})" if a.description else ""
        lines.append(f"- {a.name}{about}: {', '.join(a.values)}, or {ANY}")
    return "\n".join(lines)


def show(meta: dict[str, str]) -> str:
    specific = [f"{k}={v}" for k, v in meta.items() if v != ANY]
    return ", ".join(specific) or "general"


# -- Algorithm 2's comparison -----------------------------------------------------------------
MatchKind = Literal["exact", "subset", "narrower", "mismatch"]


def compare(query: dict[str, str], node: dict[str, str]) -> MatchKind:
    """Node metadata as value sets (`any` = every value); a query's `any` means "not stated".

    exact: equal on every attribute; subset: the query's values inside the node's (the node is
    broader, as a parent is); narrower: no conflict, but the node fixes a value the query did not
    state (a child is narrower than a general query); mismatch: both fix an attribute, differently.
    """
    kind: MatchKind = "exact"
    for attr in set(query) | set(node):
        q, n = query.get(attr, ANY), node.get(attr, ANY)
        if q == n:
            continue
        if q != ANY and n != ANY:
            return "mismatch"
        if q == ANY:  # the node is specific where the query is silent
            kind = "narrower"
        elif kind == "exact":
            kind = "subset"
    return kind
