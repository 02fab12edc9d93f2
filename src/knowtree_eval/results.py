"""The files of a run's output directory, and resuming: reading back results.jsonl and run.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from knowtree.errors import UserError
from knowtree_eval.base import Record

RESULTS = "results.jsonl"
RUN = "run.json"
SUMMARY = "summary.md"
SUMMARY_JSON = "summary.json"


def previous_run(out: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """The earlier run in `out` when it is the same evaluation; refuses to mix different ones."""
    run_file, results = out / RUN, out / RESULTS
    if not run_file.exists():
        if results.exists() and results.stat().st_size > 0:
            raise UserError(
                f"{out} holds {RESULTS} but no {RUN}: choose another --out or remove that directory"
            )
        return None
    try:
        info = json.loads(run_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{run_file}: unreadable ({exc}); choose another --out or remove it") from exc
    old = info.get("resume_key") or {}
    # both ways: a setting recorded only when set (`nav`, `choice_reads`) and now left out changed too
    names = list(dict.fromkeys([*key, *old]))
    changed = [f"{n}: {old.get(n)!r} → {key.get(n)!r}" for n in names if old.get(n) != key.get(n)]
    if changed:
        raise UserError(
            f"{out} holds a different evaluation ({'; '.join(changed)}): "
            "choose another --out, or remove it to start over"
        )
    return dict(info)


def load_records(path: Path) -> tuple[dict[tuple[str, str], Record], int]:
    """Finished records by (method, case id), the last line winning; plus the count of bad lines."""
    done: dict[tuple[str, str], Record] = {}
    bad = 0
    if not path.exists():
        return done, 0
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                record = Record.model_validate_json(line)
            except ValueError:  # a line cut short when the run was killed
                bad += 1
                continue
            done[(record.method, record.case_id)] = record
    return done, bad


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)  # atomic: a kill never leaves a half-written run.json
