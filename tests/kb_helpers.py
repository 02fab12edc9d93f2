"""Shared by the KB build tests on several processes (tests/test_kb_fanout.py, tests/test_ray_build.py):
a synthetic KB input whose build makes every stage's independent calls in several batches, and the
built KB's content as comparable rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from knowtree.store import kb as kbstore

DEVICES = ("headphones", "speaker", "earbuds", "soundbar")
FAULTS = (
    "will not pair over bluetooth",
    "battery drains very fast",
    "makes a hissing sound when noise cancelling is on",
    "keeps disconnecting from the wifi network",
    "volume buttons do nothing at all",
    "firmware update fails halfway",
)
ATTRS = """
domain = "audio devices support"
[attributes.platform]
description = "the phone the device is used with"
values = ["android", "iphone"]
[attributes.platform.keywords]
iphone = ["ios", "apple"]
[attributes.topic]
values = ["bluetooth", "battery", "noise cancelling", "wifi", "buttons", "firmware"]
"""
RULES = """
[[rules]]
id = "no-opening"
text = "Never tell the user to open the device."
forbidden = ["open the device"]
[[rules]]
text = "Only describe what the manual says."
"""
#: the build options under which every stage makes calls: chunk contexts, theme assignment,
#: subtrees, solutions (keyword arguments of `KB.build`; `cli_options` as `knowtree kb build` flags)
OPTIONS = {"context": "model", "theme_assign": "model", "solutions": "eager", "threshold": 0.8}


def cli_options(themes: str = "model") -> list[str]:
    return ["--context", "model", "--themes", themes, "--solutions", "eager", "--threshold", "0.8"]


def write_kb_inputs(root: Path, devices: int = len(DEVICES)) -> dict[str, str]:
    """Raw issues (each device's faults, said twice: on an android phone and on an iphone), a manual
    of several multi-chunk sections, the attribute configuration and two rules, under `root`.
    Returns `KB.build`'s file arguments."""
    issues = []
    for d in DEVICES[:devices]:
        for f, fault in enumerate(FAULTS):
            issues.append({"id": f"{d}-{f}-a", "text": f"My {d} {fault} with my android phone"})
            issues.append({"id": f"{d}-{f}-i", "text": f"The {d} {fault} on my iphone"})
    docs = []
    for f, fault in enumerate(FAULTS):
        steps = " ".join(
            f"Step {s}: if the device {fault}, hold the power button for {s + 3} seconds and try again."
            for s in range(1, 40)
        )
        docs.append({"id": f"manual-{f}", "title": f"When the device {fault}", "text": steps})
    (root / "issues.jsonl").write_text("".join(json.dumps(i) + "\n" for i in issues))
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (root / "attrs.toml").write_text(ATTRS)
    (root / "rules.toml").write_text(RULES)
    return {
        "issues": str(root / "issues.jsonl"),
        "docs": str(root / "docs.jsonl"),
        "attributes": str(root / "attrs.toml"),
        "rules": str(root / "rules.toml"),
    }


def kb_content(store: Any, name: str) -> dict[str, list[Any]]:
    """What a KB holds, by content, in a fixed order: themes, clusters, issues (parent links, titles,
    metadata, solutions and their checks), raw issues' links, chunks (text and context)."""
    themes = {t.id: t.name for t in kbstore.load_themes(store, name)}

    def dumped(value: Any) -> str:
        return json.dumps(value, sort_keys=True)

    return {
        "themes": sorted(themes.values()),
        "clusters": sorted(
            (c.id, themes[c.theme_id], c.seed_raw_id, c.size, c.centroid)
            for c in kbstore.load_clusters(store, name)
        ),
        "issues": sorted(
            (i.id, i.kind, i.parent or "", i.cluster_id, i.title, dumped(i.metadata), dumped(i.solution), i.status,
             dumped(i.compliance))
            for i in kbstore.load_issues(store, name)
        ),
        "raw": sorted((r.id, r.text, r.cluster_id or "", r.issue_id or "") for r in kbstore.load_raw(store, name)),
        "chunks": sorted((c.id, c.text, c.context) for c in kbstore.load_chunks(store, name)),
    }
