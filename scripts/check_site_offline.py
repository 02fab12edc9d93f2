"""Open the built docs site from its folder (file://) in headless chromium and fail if a page requests
anything off the machine; optionally save screenshots.

    python scripts/check_site_offline.py site [--shots DIR]

Every page is loaded with name resolution disabled (`--host-resolver-rules="MAP * ~NOTFOUND"`) and a
network log; the URLs chromium requests for about:blank (its own background requests) are the baseline,
and any other URL that is not file:, data: or blob: is an external request by the site.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-default-apps",
    "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=5000", "--window-size=1280,900",
]
LOCAL = ("file:", "data:", "blob:", "chrome", "about:")
# the home page, a task page, and the search (its worker and inlined index) opened with a query
PAGES = {"index.html": "screenshot-home.png", "tasks/memory.html": "screenshot-task-memory.png", "index.html?q=memory": None}


def requested(browser: str, url: str, shot: Path | None) -> set[str]:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "net.json"
        args = [browser, *FLAGS, f"--log-net-log={log}", f"--user-data-dir={tmp}/profile"]
        args.append(f"--screenshot={shot}" if shot else f"--screenshot={tmp}/shot.png")
        subprocess.run([*args, url], capture_output=True, timeout=120, check=True)
        text = log.read_text(encoding="utf-8", errors="replace")
    return {u.split("?")[0] for u in re.findall(r'"url":"([^"]+)"', text) if not u.startswith(LOCAL)}


def main(argv: list[str]) -> int:
    site = Path(argv[0]).resolve()
    shots = Path(argv[argv.index("--shots") + 1]) if "--shots" in argv else None
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("chromium not installed: offline check skipped")
        return 0
    baseline = requested(browser, "about:blank", None)
    bad: dict[str, list[str]] = {}
    for page, shot_name in PAGES.items():
        shot = shots / shot_name if shots and shot_name else None
        extra = sorted(requested(browser, (site / page.split("?")[0]).as_uri() + page[len(page.split("?")[0]):], shot)
                       - baseline)
        if extra:
            bad[page] = extra
    if bad:
        print(json.dumps({"external requests": bad, "browser's own (ignored)": sorted(baseline)}, indent=1))
        return 1
    print(f"site offline: {len(PAGES)} pages opened from {site.as_uri()}, no request left the machine")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
