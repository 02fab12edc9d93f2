"""The web UI in headless Chromium (Debian's `chromium`; skipped when it is not installed): open a
tree, expand a branch with the keyboard, ask, see citations and the highlighted path, jump to a cited
node. Screenshots go to $KT_UI_SCREENSHOTS (default: the test's tmp dir)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("websocket")

from cdp import Browser, find_chromium
from conftest import paragraphs
from server_helpers import free_port, start_server, wait_job

pytestmark = pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (apt-get install chromium)")


def test_browse_ask_cite_highlight(tmp_path: Path) -> None:
    shots = Path(os.environ.get("KT_UI_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "lighthouse-log.txt").write_text(paragraphs(20))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = start_server(tmp_path, port, delay=0.0)
    browser = None
    try:
        with httpx.Client(base_url=base, timeout=30) as c:
            job = c.post("/v1/trees/log/build", json={"paths": [str(docs)]}).json()
            assert wait_job(c, job["id"])["state"] == "done"
        browser = Browser(tmp_path / "profile")
        browser.goto(f"{base}/ui?tree=log")
        assert browser.js("document.querySelectorAll('[role=treeitem]').length") >= 21
        # a collapsed branch, opened from the keyboard
        branch = "document.querySelector('li[role=treeitem] details:not([open])')"
        assert browser.js(f"!!{branch}")
        browser.js(f"{branch}.setAttribute('id', 'target'); document.querySelector('#target > summary').focus()")
        browser.press("Enter", 13)
        browser.wait("document.getElementById('target').open")
        browser.wait("document.getElementById('target').parentElement.getAttribute('aria-expanded') === 'true'")
        browser.screenshot(shots / "ui-outline.png")

        browser.js("document.getElementById('q').value = 'keeper number 7 ships'")
        browser.js("document.querySelector('#ask-form button').click()")
        browser.wait("document.getElementById('answer').dataset.done === '1'", timeout=60)
        answer = browser.js("document.querySelector('.answer-text').textContent")
        assert answer and not answer.startswith("error"), answer
        cites = browser.js("[...document.querySelectorAll('button.cite')].map(b => b.dataset.node)")
        assert cites, "no citations shown"
        on_path = browser.js("[...document.querySelectorAll('li.on-path')].map(li => li.dataset.node)")
        assert len(on_path) >= 2 and cites[0] in on_path  # the path from the root to the cited leaf
        browser.js("document.querySelector('button.cite').click()")
        browser.wait(f"document.querySelector('#node code') && document.querySelector('#node code').textContent === '{cites[0]}'")
        assert browser.js(f"document.getElementById('n-{cites[0]}').classList.contains('selected')")
        assert browser.js("document.querySelector('#node pre.text').textContent.length") > 50
        browser.js("window.scrollTo(0, 0)")
        browser.screenshot(shots / "ui-answer.png")

        # upload a file: a build job appears and its progress comes live over SSE until it is done
        extra = tmp_path / "harbour.md"
        extra.write_text("# Harbour\n\nThe harbour master logs every ferry at dawn.\n")
        browser.js("document.querySelector('#upload-form input[name=tree]').value = 'harbour'")
        browser.set_files("#upload-form input[type=file]", [str(extra)])
        browser.js("document.querySelector('#upload-form button').click()")
        browser.wait("[...document.querySelectorAll('#job-list li')].some(li => li.textContent.includes('harbour')"
                     " && li.querySelector('.state').textContent === 'done')", timeout=60)
        browser.goto(f"{base}/ui?tree=harbour")
        assert "harbour master" in browser.js("document.querySelector('.outline').textContent")
    finally:
        if browser is not None:
            browser.close()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
