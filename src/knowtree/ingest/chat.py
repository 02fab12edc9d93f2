"""Load conversations: OpenAI-style message lists (JSONL or JSON), OpenAI chat exports, LoCoMo.

Every message becomes a `ChatMessage` (role, content verbatim, optional name, timestamp, session and
id). All records are read and validated before anything is returned; the first problem raises
`InputError` naming the file and the record, so a bad import never touches what is stored.

Formats (`fmt="auto"` picks by content):

* ``jsonl``: one message object per line: ``{"role", "content", "name"?, "timestamp"?, "session"?, "id"?}``;
* ``json``: a JSON list of such objects, or ``{"messages": [...]}``;
* ``openai``: ChatGPT's ``conversations.json`` export (each conversation a session, its current branch);
* ``locomo``: LoCoMo conversations (``session_N`` lists with ``session_N_date_time``; ``dia_id`` kept).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from knowtree.errors import InputError
from knowtree.ingest.problems import missing_reason

ROLES = ("user", "assistant", "system", "tool")
FORMATS = ("auto", "jsonl", "json", "openai", "locomo")
#: messages further apart than this start a new session (when no session is given)
SESSION_GAP = timedelta(hours=3)


class ChatMessage(BaseModel):
    """One message, verbatim. `time` is the parsed timestamp (ISO 8601), `timestamp` the original."""

    model_config = ConfigDict(frozen=True)

    role: str
    content: str
    name: str | None = None
    timestamp: str | None = None
    time: str | None = None
    session: str | None = None
    id: str | None = None  # the source's own id (LoCoMo dia_id "D1:3", an export's message id)
    attachment: str | None = None  # e.g. the caption of a shared photo
    #: the add key a server gives the message (never read from a record): a retried or resumed add
    #: skips the messages whose key the memory holds already (`Memory.add`)
    key: str | None = None

    @property
    def speaker(self) -> str:
        return self.name or self.role

    def display(self) -> str:
        """The message as models and search see it: speaker, words, and what was attached."""
        text = f"{self.speaker}: {self.content}"
        if self.attachment:
            text += f" [shares {self.attachment}]"
        return text


# -- timestamps -----------------------------------------------------------------------------------
_MONTHS = {
    m: i + 1
    for i, names in enumerate(
        [
            ("jan", "january"),
            ("feb", "february"),
            ("mar", "march"),
            ("apr", "april"),
            ("may",),
            ("jun", "june"),
            ("jul", "july"),
            ("aug", "august"),
            ("sep", "sept", "september"),
            ("oct", "october"),
            ("nov", "november"),
            ("dec", "december"),
        ]
    )
    for m in names
}
_TIME = re.compile(r"\b(?P<h>\d{1,2})[:.](?P<mi>\d{2})(?::(?P<s>\d{2}))?\s*(?P<ampm>[ap]\.?m\.?)?(?![\w])", re.I)
_DATES = [
    re.compile(r"^(?P<d>\d{1,2})(?:st|nd|rd|th)?\s+(?P<mon>[a-z]+)\.?\s+(?P<y>\d{4})$", re.I),
    re.compile(r"^(?P<mon>[a-z]+)\.?\s+(?P<d>\d{1,2})(?:st|nd|rd|th)?\s+(?P<y>\d{4})$", re.I),
]


def parse_timestamp(value: Any) -> datetime:
    """A message time: ISO 8601, Unix seconds, or a human date such as "1:56 pm on 8 May, 2023".

    Raises ValueError with the reason when the value is not a time.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a timestamp: {value!r}")
    if isinstance(value, int | float):
        if not 0 <= value < 1e11:
            raise ValueError(f"Unix time out of range: {value!r}")
        try:
            return datetime.fromtimestamp(float(value), UTC).replace(tzinfo=None)
        except (OverflowError, OSError) as exc:
            raise ValueError(f"Unix time out of range: {value!r} ({exc})") from None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"not a timestamp: {value!r}")
    text = " ".join(value.strip().split())
    if re.fullmatch(r"\d{9,11}(\.\d+)?", text):
        return parse_timestamp(float(text))
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        pass
    else:
        try:
            return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo else parsed
        except OverflowError:  # 9999-12-31T23:00-05:00 is past the last representable UTC time
            raise ValueError(f"{value!r} is out of range once converted to UTC") from None
    hour = minute = second = 0
    t = _TIME.search(text)
    rest = text
    if t:
        hour, minute, second = int(t.group("h")), int(t.group("mi")), int(t.group("s") or 0)
        ampm = (t.group("ampm") or "").lower().replace(".", "")
        if ampm and not 1 <= hour <= 12:
            raise ValueError(f"hour {hour} with {ampm} in {value!r}")
        if ampm == "pm" and hour != 12:
            hour += 12
        elif ampm == "am" and hour == 12:
            hour = 0
        rest = text[: t.start()] + " " + text[t.end() :]
    rest = " ".join(re.sub(r"\b(on|at)\b|,", " ", rest, flags=re.I).split())
    for pattern in _DATES:
        m = pattern.match(rest)
        month = _MONTHS.get(m.group("mon").lower()) if m else None
        if m is None or month is None:
            continue
        try:
            return datetime(int(m.group("y")), month, int(m.group("d")), hour, minute, second)
        except ValueError as exc:
            raise ValueError(f"{value!r}: {exc}") from None
    raise ValueError(f"unrecognised timestamp {value!r} (use ISO 8601, Unix seconds or '8 May 2023')")


# -- loading --------------------------------------------------------------------------------------
def load_chat(path: str | Path, *, fmt: str = "auto", conversation: str | None = None) -> list[ChatMessage]:
    """Read every message of a chat file, validated; raises `InputError` naming the record."""
    p = Path(path)
    name = str(path)
    if fmt not in FORMATS:
        raise InputError(name, f"unknown format {fmt!r} (use one of {', '.join(FORMATS)})")
    if not p.is_file():
        raise InputError(name, missing_reason(name))
    try:
        raw = p.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(name, f"cannot read as UTF-8 text ({exc})") from None
    if not raw.strip():
        raise InputError(name, "file is empty")
    if fmt == "auto":
        fmt = _sniff(raw, name)
    if fmt == "jsonl":
        records = []
        for n, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append((f"line {n}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise InputError(name, f"line {n}: not valid JSON ({exc.msg})") from None
        messages = [_message(rec, name, where) for where, rec in records]
    else:
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InputError(name, f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
        if fmt == "locomo":
            messages = _locomo(data, name, conversation)
        elif fmt == "openai":
            messages = _openai_export(data, name, conversation)
        else:
            items = data.get("messages") if isinstance(data, dict) else data
            if not isinstance(items, list):
                raise InputError(name, "expected a JSON list of messages or an object with 'messages'")
            messages = [_message(rec, name, f"message {i}") for i, rec in enumerate(items)]
    if not messages:
        raise InputError(name, "no messages found")
    return messages


def _sniff(raw: str, name: str) -> str:
    head = raw.lstrip()
    if head.startswith("["):
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InputError(name, f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
        first = data[0] if data else {}
        if isinstance(first, dict) and "conversation" in first and "qa" in first:
            return "locomo"
        if isinstance(first, dict) and "mapping" in first:
            return "openai"
        return "json"
    if head.startswith("{"):
        first_line = head.splitlines()[0].strip()
        try:
            first = json.loads(first_line)
        except json.JSONDecodeError:
            first = None
        if isinstance(first, dict) and not {"messages", "mapping", "conversation"} & set(first):
            return "jsonl"  # a complete message object on the first line: one message per line
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InputError(name, f"not valid JSON or JSONL ({exc.msg} at line {exc.lineno})") from None
        if "conversation" in data:
            return "locomo"
        if "mapping" in data:
            return "openai"
        return "json"
    raise InputError(name, "not a chat file: expected JSON or JSONL messages")


def _text(content: Any, name: str, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return "\n".join(texts)
    raise InputError(name, f"{where}: 'content' must be a string or a list of text parts")


def unseen(messages: Sequence[ChatMessage], held: set[str]) -> list[ChatMessage]:
    """`messages` less those whose add key is in `held` or repeats an earlier one's (`held` grows)."""
    out = []
    for m in messages:
        if m.key is None or m.key not in held:
            out.append(m)
            if m.key is not None:
                held.add(m.key)
    return out


def parse_messages(
    records: Sequence[ChatMessage | dict[str, Any]], source: str = "messages"
) -> list[ChatMessage]:
    """OpenAI-style message dicts (role, content, optional name/timestamp/session/id) → `ChatMessage`s,
    all validated first: a bad record raises `InputError` naming it."""
    if isinstance(records, dict):
        records = [records]
    return [
        r if isinstance(r, ChatMessage) else _message(r, source, f"message {i}")
        for i, r in enumerate(records)
    ]


def _message(rec: Any, name: str, where: str, **extra: Any) -> ChatMessage:
    if not isinstance(rec, dict):
        raise InputError(name, f"{where}: expected a message object, got {type(rec).__name__}")
    role = rec.get("role")
    if role is None:
        raise InputError(name, f"{where}: missing 'role'")
    if role not in ROLES:
        raise InputError(name, f"{where}: unknown role {role!r} (use one of {', '.join(ROLES)})")
    if "content" not in rec or rec["content"] is None:
        raise InputError(name, f"{where}: missing 'content'")
    content = _text(rec["content"], name, where)
    speaker = rec.get("name")
    if speaker is not None and not isinstance(speaker, str):
        raise InputError(name, f"{where}: 'name' must be a string")
    for field, value in (("content", content), ("name", speaker or "")):
        if "\x00" in value:  # no text holds one (and PostgreSQL's TEXT cannot): refused on every backend
            raise InputError(name, f"{where}: {field!r} holds a NUL character (\\x00); remove it")
    stamp = rec.get("timestamp", rec.get("time", rec.get("created_at")))
    iso = None
    if stamp is not None and stamp != "":
        try:
            iso = parse_timestamp(stamp).isoformat()
        except ValueError as exc:
            raise InputError(name, f"{where}: bad timestamp: {exc}") from None
    session = rec.get("session")
    mid = rec.get("id", rec.get("dia_id"))
    return ChatMessage(
        role=role,
        content=content,
        name=speaker or None,
        timestamp=None if stamp in (None, "") else str(stamp),
        time=iso,
        session=None if session is None else str(session),
        id=None if mid is None else str(mid),
        attachment=rec.get("attachment") if isinstance(rec.get("attachment"), str) else None,
        **extra,
    )


def _pick(items: list[Any], ids: list[str], name: str, conversation: str | None, what: str) -> list[Any]:
    if conversation is None:
        if len(items) == 1:
            return items
        shown = ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "")
        raise InputError(
            name, f"the file holds {len(items)} {what}s ({shown}): choose one with --conversation"
        )
    chosen = [it for it, i in zip(items, ids, strict=True) if i == conversation]
    if not chosen and conversation.isdigit() and int(conversation) < len(items):
        chosen = [items[int(conversation)]]
    if not chosen:
        raise InputError(name, f"no {what} {conversation!r} (there are: {', '.join(ids[:10])})")
    return chosen


_SESSION_KEY = re.compile(r"session_(\d+)")


def _locomo(data: Any, name: str, conversation: str | None) -> list[ChatMessage]:
    samples = [data] if isinstance(data, dict) else data
    if not isinstance(samples, list) or not all(isinstance(s, dict) for s in samples):
        raise InputError(name, "LoCoMo: expected a conversation object or a list of them")
    ids = [str(s.get("sample_id") or i) for i, s in enumerate(samples)]
    (sample,) = _pick(samples, ids, name, conversation, "conversation")
    conv = sample.get("conversation")
    if not isinstance(conv, dict):
        raise InputError(name, f"conversation {sample.get('sample_id')}: missing 'conversation' object")
    sessions = sorted(
        (int(m.group(1)), v)
        for k, v in conv.items()
        if (m := _SESSION_KEY.fullmatch(k)) and isinstance(v, list)
    )
    out: list[ChatMessage] = []
    for num, turns in sessions:
        date = conv.get(f"session_{num}_date_time")
        for t, turn in enumerate(turns):
            where = f"session {num}, turn {t}"
            if not isinstance(turn, dict) or "text" not in turn or "speaker" not in turn:
                raise InputError(name, f"{where}: expected an object with 'speaker' and 'text'")
            rec = {
                "role": "user",
                "name": turn["speaker"],
                "content": turn["text"],
                "timestamp": date,
                "session": str(num),
                "id": turn.get("dia_id"),
                "attachment": turn.get("blip_caption"),
            }
            out.append(_message(rec, name, where))
    return out


def _openai_export(data: Any, name: str, conversation: str | None) -> list[ChatMessage]:
    convs = [data] if isinstance(data, dict) else data
    if not isinstance(convs, list) or not all(isinstance(c, dict) and "mapping" in c for c in convs):
        raise InputError(name, "OpenAI export: expected conversations with a 'mapping'")
    ids = [str(c.get("id") or c.get("conversation_id") or c.get("title") or i) for i, c in enumerate(convs)]
    if conversation is not None:
        convs = _pick(convs, ids, name, conversation, "conversation")
    convs = sorted(convs, key=lambda c: c.get("create_time") or 0)
    out: list[ChatMessage] = []
    for ci, conv in enumerate(convs):
        mapping = conv["mapping"]
        title = str(conv.get("title") or f"conversation {ci + 1}")
        if not isinstance(mapping, dict):
            raise InputError(name, f"conversation {title!r}: 'mapping' must be an object")
        # the branch the user last saw: from current_node back to the root
        node_id = conv.get("current_node") or next(
            (k for k, v in mapping.items() if isinstance(v, dict) and not v.get("children")), None
        )
        chain: list[str] = []
        seen: set[str] = set()
        while node_id and node_id in mapping and node_id not in seen:
            seen.add(node_id)
            chain.append(node_id)
            node_id = (mapping[node_id] or {}).get("parent")
        for mid in reversed(chain):
            msg = (mapping[mid] or {}).get("message")
            if not msg:
                continue
            where = f"conversation {title!r}, message {mid}"
            author = msg.get("author") or {}
            content = msg.get("content") or {}
            parts = content.get("parts") if isinstance(content, dict) else None
            text = _text(parts or [], name, where) if parts is not None else str(content.get("text") or "")
            if not text.strip():
                continue  # hidden system prompts, tool scaffolding without text
            rec = {
                "role": author.get("role"),
                "name": author.get("name"),
                "content": text,
                "timestamp": msg.get("create_time") or conv.get("create_time"),
                "session": title,
                "id": mid,
            }
            out.append(_message(rec, name, where))
    return out


def sessions_of(messages: list[ChatMessage], previous: ChatMessage | None = None) -> list[int]:
    """Where sessions start: indexes of messages that open a new session.

    A session is given by `session`; without one, a gap of more than `SESSION_GAP` (or a new
    date with a different day) between timed messages starts a new one.
    """
    starts: list[int] = []
    prev = previous
    for i, m in enumerate(messages):
        if prev is None:
            starts.append(i)
        elif m.session is not None or prev.session is not None:
            if m.session != prev.session:
                starts.append(i)
        elif m.time and prev.time:
            a, b = datetime.fromisoformat(prev.time), datetime.fromisoformat(m.time)
            if b - a > SESSION_GAP or b < a:
                starts.append(i)
        prev = m
    return starts
