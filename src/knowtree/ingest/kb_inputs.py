"""Inputs of a knowledge base (AutoKB): raw issues, the attribute configuration, domain rules, and
domain documents given as records.

Every loader reads and checks the whole file before returning, and a problem raises one
`InputError` naming the file and the line (or record) at fault, so nothing is stored from a bad file.

* raw issues: JSONL (`{"text": ..., "id"?: ..., "timestamp"?: ...}` a line) or CSV with a header
  naming a text column (`text`, `issue`, `question`, `description`, `query`);
* attributes: TOML or YAML, `domain = "..."` and `[attributes.NAME]` tables with `values = [...]`
  (the allowed set), an optional `description` and optional `keywords = {value = ["word", ...]}`;
* rules: TOML (`[[rules]]` with `text`, optional `id`, `forbidden = [...]`, `required = [...]`,
  `append = "..."`: a mandated statement added to a solution that lacks the required phrases,
  `question = "..."`: the yes/no question the judge is asked, "yes" meaning the rule is broken,
  `threshold = 0.5`: the judge's P(yes) from which this rule counts as broken,
  `judged = false`: checked by its phrases only, never asked of the judge)
  or plain text, one rule a line (`-`, `*` or `1.` bullets allowed, `#` comments skipped);
* documents: JSONL / JSONL.gz records (`id`/`doc_id`, `title`/`question`/`focus`,
  `text`/`answer`/`body`/`content`) become one section each; any other file knowtree ingests
  (text, Markdown, PDF, DOCX, HTML) becomes sections by its own structure.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from knowtree.errors import InputError
from knowtree.ingest.limits import read_gzip
from knowtree.ingest.roots import ReadRoots
from knowtree.text import phrase_in

ANY = "any"  # the attribute value of a broad issue: every allowed value
_TEXT_KEYS = ("text", "issue", "question", "description", "query", "body")
_ID_KEYS = ("id", "issue_id", "ticket", "ticket_id")
_TIME_KEYS = ("timestamp", "time", "date", "created")


@dataclass(frozen=True)
class RawIssue:
    id: str
    text: str
    timestamp: str | None = None


@dataclass
class Attribute:
    name: str
    values: list[str]
    description: str = ""
    keywords: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class AttributeConfig:
    domain: str
    attributes: list[Attribute]
    source: str = ""

    def names(self) -> list[str]:
        return [a.name for a in self.attributes]

    def get(self, name: str) -> Attribute:
        for a in self.attributes:
            if a.name == name:
                return a
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "attributes": {
                a.name: {"values": a.values, "description": a.description, "keywords": a.keywords}
                for a in self.attributes
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "") -> AttributeConfig:
        return parse_attributes(data, source or "(stored attributes)")


@dataclass
class Rule:
    id: str
    text: str
    forbidden: list[str] = field(default_factory=list)
    required: list[str] = field(default_factory=list)
    #: a statement the domain owner mandates, appended to a solution that lacks a required phrase
    #: (it must contain every required phrase and no rule's forbidden one; checked at load)
    append: str = ""
    #: a yes/no question whose "yes" means the rule is broken, asked of the judge instead of the
    #: rule itself (a small model answers a concrete question better than it applies a rule)
    question: str = ""
    #: P(yes) from which the judge's answer counts as broken, where this rule's question needs its
    #: own (None: `compliance.VIOLATION_AT`); `benchmarks/bench_kb_judge.py` measures one
    threshold: float | None = None
    #: False: the rule is checked by its `forbidden` / `required` phrases only (no judge call); for a
    #: rule whose breaches are phrases, where a small judge's grades would need their own calibration
    judged: bool = True


@dataclass
class DocSection:
    """One unit of domain knowledge: a record or a section of a document."""

    id: str
    title: str
    text: str
    source: str
    path: list[str] = field(default_factory=list)  # section path inside the document


# -- raw issues ----------------------------------------------------------------------------
def load_raw_issues(path: str | Path) -> list[RawIssue]:
    p = str(path)
    text = _read_text(p)
    issues = _issues_from_csv(p, text) if p.lower().endswith(".csv") else _issues_from_jsonl(p, text)
    if not issues:
        raise InputError(p, "no raw issues in the file")
    seen: set[str] = set()
    for issue in issues:
        if issue.id in seen:
            raise InputError(p, f"issue id {issue.id!r} appears twice")
        seen.add(issue.id)
    return issues


def _jsonl(
    path: str, text: str, *, expected: str, strings: bool = False
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of each non-blank line; a bare string is `{"text": ...}` when `strings`."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"line {number}: not valid JSON ({exc.msg})") from None
        if strings and isinstance(record, str):
            record = {"text": record}
        if not isinstance(record, dict):
            raise InputError(path, f"line {number}: {expected}")
        if _holds_nul(record):  # an escaped \u0000: no text holds one, and PostgreSQL's TEXT cannot
            raise InputError(path, f"line {number}: a value holds a NUL character (\\u0000); remove it")
        yield number, record


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    return False


def _issues_from_jsonl(path: str, text: str) -> list[RawIssue]:
    return [
        _issue(path, f"line {number}", record)
        for number, record in _jsonl(
            path, text, expected="expected a JSON object with a text field", strings=True
        )
    ]


def _issues_from_csv(path: str, text: str) -> list[RawIssue]:
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or not any(k.strip().lower() in _TEXT_KEYS for k in reader.fieldnames):
        raise InputError(path, f"line 1: the header needs a text column (one of {', '.join(_TEXT_KEYS)})")
    out = []
    for row in reader:
        record = {k.strip().lower(): v for k, v in row.items() if k is not None}
        out.append(_issue(path, f"line {reader.line_num}", record))
    return out


def _issue(path: str, where: str, record: dict[str, Any]) -> RawIssue:
    body = next((record[k] for k in _TEXT_KEYS if isinstance(record.get(k), str)), None)
    if body is None or not body.strip():
        raise InputError(path, f"{where}: no issue text (a non-empty field {' / '.join(_TEXT_KEYS)})")
    rid = next((str(record[k]) for k in _ID_KEYS if record.get(k) not in (None, "")), None)
    if rid is None:  # content-hash id: stable across runs and across files
        rid = "r" + hashlib.sha256(body.strip().encode("utf-8")).hexdigest()[:12]
    ts = next((str(record[k]) for k in _TIME_KEYS if record.get(k) not in (None, "")), None)
    return RawIssue(id=rid, text=" ".join(body.split()), timestamp=ts)


# -- attribute configuration ---------------------------------------------------------------
def load_attributes(path: str | Path) -> AttributeConfig:
    p = str(path)
    data = _read_mapping(p)
    return parse_attributes(data, p)


def parse_attributes(data: dict[str, Any], path: str) -> AttributeConfig:
    table = data.get("attributes")
    if not isinstance(table, dict) or not table:
        raise InputError(path, "no [attributes] table (attribute name → values = [...])")
    attributes = []
    for name, spec in table.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,40}", name):
            raise InputError(path, f"attribute {name!r}: use letters, digits and '_'")
        if isinstance(spec, list):
            spec = {"values": spec}
        if not isinstance(spec, dict):
            raise InputError(path, f"attribute {name!r}: expected a table with values = [...]")
        values = spec.get("values")
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, str) and v.strip() for v in values)
        ):
            raise InputError(path, f"attribute {name!r}: values must be a non-empty list of strings")
        values = [v.strip() for v in values]
        if ANY in values:
            raise InputError(path, f"attribute {name!r}: {ANY!r} is reserved (it means every value)")
        if len(set(values)) != len(values):
            raise InputError(path, f"attribute {name!r}: a value is listed twice")
        keywords = spec.get("keywords") or {}
        if not isinstance(keywords, dict):
            raise InputError(path, f"attribute {name!r}: keywords must map a value to a list of words")
        for value, words in keywords.items():
            if value not in values:
                raise InputError(path, f"attribute {name!r}: keywords for unknown value {value!r}")
            if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
                raise InputError(path, f"attribute {name!r}: keywords of {value!r} must be a list of strings")
        attributes.append(
            Attribute(
                name=name,
                values=values,
                description=str(spec.get("description", "")),
                keywords={k: [w.lower() for w in v] for k, v in keywords.items()},
            )
        )
    return AttributeConfig(domain=str(data.get("domain", "")), attributes=attributes, source=path)


# -- domain rules --------------------------------------------------------------------------
def load_rules(path: str | Path) -> list[Rule]:
    p = str(path)
    if p.lower().endswith((".toml", ".yaml", ".yml", ".json")):
        data = _read_mapping(p)
        items = data.get("rules")
        if not isinstance(items, list) or not items:
            raise InputError(p, "no rules: expected [[rules]] entries with a text")
        rules = []
        for number, item in enumerate(items, start=1):
            if isinstance(item, str):
                item = {"text": item}
            if (
                not isinstance(item, dict)
                or not isinstance(item.get("text"), str)
                or not item["text"].strip()
            ):
                raise InputError(p, f"rule {number}: needs a non-empty text")
            for key in ("forbidden", "required"):
                v = item.get(key, [])
                if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
                    raise InputError(p, f"rule {number}: {key} must be a list of phrases")
            append, question = item.get("append", ""), item.get("question", "")
            if not isinstance(append, str) or not isinstance(question, str):
                raise InputError(p, f"rule {number}: append and question must be texts")
            threshold = item.get("threshold")
            if threshold is not None and (
                isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 < threshold < 1
            ):
                raise InputError(p, f"rule {number}: threshold must be a number between 0 and 1")
            judged = item.get("judged", True)
            if not isinstance(judged, bool):
                raise InputError(p, f"rule {number}: judged must be true or false")
            if not judged and not (item.get("forbidden") or item.get("required")):
                raise InputError(p, f"rule {number}: judged = false needs forbidden or required phrases")
            if not judged and (question or threshold is not None):
                raise InputError(p, f"rule {number}: a rule with judged = false has no question or threshold")
            rules.append(
                Rule(
                    id=str(item.get("id") or f"R{number}"),
                    text=" ".join(item["text"].split()),
                    forbidden=list(item.get("forbidden", [])),
                    required=list(item.get("required", [])),
                    append=" ".join(append.split()),
                    question=" ".join(question.split()),
                    threshold=float(threshold) if threshold is not None else None,
                    judged=judged,
                )
            )
        _check_appends(p, rules)
    else:
        rules = []
        for line in _read_text(p).splitlines():
            body = re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", line).strip()
            if body and not line.lstrip().startswith("#"):
                rules.append(Rule(id=f"R{len(rules) + 1}", text=body))
        if not rules:
            raise InputError(p, "no rules in the file (one rule a line)")
    ids = [r.id for r in rules]
    if len(set(ids)) != len(ids):
        raise InputError(p, "two rules share an id")
    return rules


def _check_appends(path: str, rules: list[Rule]) -> None:
    """A mandated statement must satisfy its own rule and break none (else appending it would
    trade one violation for another)."""
    for number, rule in enumerate(rules, start=1):
        if not rule.append:
            continue
        if not rule.required:
            raise InputError(
                path, f"rule {number}: append needs required phrases (it is added when they are missing)"
            )
        for phrase in rule.required:
            if not phrase_in(phrase, rule.append):
                raise InputError(path, f"rule {number}: append lacks its own required phrase {phrase!r}")
        for other in rules:
            for phrase in other.forbidden:
                if phrase_in(phrase, rule.append):
                    raise InputError(
                        path, f"rule {number}: append contains {phrase!r}, forbidden by rule {other.id}"
                    )


# -- domain documents ----------------------------------------------------------------------
def load_kb_docs(paths: Sequence[str], within: ReadRoots | None = None) -> list[DocSection]:
    """Every document as sections; JSONL records one section each. The first bad file raises.
    `within`: every file read (those in folders too) must resolve under these roots (`ingest.roots`)."""
    out: list[DocSection] = []
    others: list[str] = []
    for entry in paths:
        if entry.lower().endswith((".jsonl", ".jsonl.gz", ".ndjson")):
            if within is not None:
                within.check(entry)
            out.extend(_records(entry))
        else:
            others.append(entry)
    if others:
        out.extend(_structured_sections(others, within))
    if not out:
        raise InputError(", ".join(paths) or "(no documents)", "no domain documents found")
    return out


def _records(path: str) -> list[DocSection]:
    out = []
    for number, r in _jsonl(path, _read_text(path), expected="expected a JSON object"):
        body = next((r[k] for k in ("text", "answer", "body", "content") if isinstance(r.get(k), str)), "")
        title = next((r[k] for k in ("title", "question", "focus", "name") if isinstance(r.get(k), str)), "")
        if not body.strip() and not title.strip():
            raise InputError(path, f"line {number}: a record needs a text (text/answer/body/content)")
        rid = str(r.get("id") or r.get("doc_id") or f"{Path(path).name}:{number}")
        section_path = [p for p in (r.get("focus"), title) if isinstance(p, str) and p.strip()]
        if not section_path and title:
            section_path = [title]
        if isinstance(r.get("title"), str) and ">" in r["title"]:
            section_path = [p.strip() for p in r["title"].split(">")]
        full = (
            f"{r['question']}\n{body}"
            if isinstance(r.get("question"), str) and title != r.get("question")
            else body
        )
        out.append(
            DocSection(
                id=rid, title=title.strip(), text=full.strip() or title, source=path, path=section_path
            )
        )
    return out


def _structured_sections(paths: list[str], within: ReadRoots | None) -> list[DocSection]:
    from knowtree.ingest.sources import load_sources

    out: list[DocSection] = []
    for sd in load_sources(paths, headings=True, within=within):
        text = sd.document.text
        name = Path(sd.path).name
        if not sd.sections:
            out.append(DocSection(id=name, title=name, text=text, source=sd.path, path=[name]))
            continue
        stack: list[tuple[int, str]] = []
        for i, sec in enumerate(sd.sections):
            stack = [s for s in stack if s[0] < sec.level] + [(sec.level, sec.title)]
            end = sec.end if sec.end >= 0 else len(text)
            body = text[sec.start : end].strip()
            if body:
                out.append(
                    DocSection(
                        id=f"{name}#{i + 1}",
                        title=sec.title,
                        text=body,
                        source=sd.path,
                        path=[t for _, t in stack],
                    )
                )
    return out


# -- file reading --------------------------------------------------------------------------
def _read_text(path: str) -> str:
    if path.lower().endswith(".gz"):  # inflated in bounded steps, refused past the cap (limits.py)
        if not Path(path).is_file():
            raise InputError(path, "cannot read the file (no such file)")
        data = read_gzip(path)
    else:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise InputError(path, f"cannot read the file ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(path, f"line {line}: not UTF-8 text") from None
    if "\x00" in text:  # refused, not dropped: a record's text is stored as given, on every backend
        line = text[: text.index("\x00")].count("\n") + 1
        raise InputError(path, f"line {line}: holds a NUL character (\\x00); remove it")
    return text


def _read_mapping(path: str) -> dict[str, Any]:
    text = _read_text(path)
    lower = path.lower()
    if lower.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise InputError(
                path, "YAML needs PyYAML (pip install pyyaml); or write the file as TOML"
            ) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}: " if mark is not None else ""
            raise InputError(path, f"{where}not valid YAML ({getattr(exc, 'problem', exc)})") from None
    elif lower.endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"line {exc.lineno}: not valid JSON ({exc.msg})") from None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(path, f"not valid TOML ({exc})") from None  # the message names line and column
    if not isinstance(data, dict):
        raise InputError(path, "expected a table / mapping at the top level")
    return data
