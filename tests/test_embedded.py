"""Integration tests on the real embedded model (few and short: each model call takes seconds on 2 cores).

Skipped when the [local] extra is not installed or KNOWTREE_SKIP_EMBEDDED=1.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import httpx
import pytest

import knowtree

pytestmark = pytest.mark.embedded

SAMPLE = resources.files("knowtree").joinpath("samples", "lighthouse")


@pytest.fixture(scope="module")
def sample_kb(tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("sample")
    corpus = work / "lighthouse"
    corpus.mkdir()
    for item in SAMPLE.iterdir():
        if item.name.endswith(".md"):
            (corpus / item.name).write_text(item.read_text(encoding="utf-8"), encoding="utf-8")
    kt = knowtree.open(work / "kb.db", threads=2)
    report = kt.build([str(corpus)], tree="sample")
    yield kt, report, corpus
    kt.close()


def test_build_fills_metadata_and_rebuild_is_free(sample_kb) -> None:
    kt, report, corpus = sample_kb
    assert report.leaves == 3 and report.usage.calls == 4
    tree = kt.tree("sample")
    for node in tree.nodes.values():
        assert node.meta.summary and node.meta.fallback is None
        assert node.meta.content_types and node.meta.about
    again = kt.build([str(corpus)], tree="sample")
    assert again.usage.calls == 0 and again.usage.cached == 4


def test_the_walk_cites_the_right_file(sample_kb) -> None:
    kt, _, _ = sample_kb
    answer = kt.tree("sample").ask("Which database did the team choose for Lighthouse?", mode="walk")
    assert answer.status == "complete", answer.trace
    assert "postgres" in (answer.answer or "").lower()
    assert any(c.file.endswith("meetings.md") for c in answer.citations)
    assert all(c.line_start >= 1 and c.line_end >= c.line_start for c in answer.citations)
    assert [s.action for s in answer.trace][:2] == ["choose", "read"]


def test_answer_split_across_two_files_cites_both(sample_kb) -> None:
    """The README's question, asked the default way (a chunk tree: the index, one answer call)."""
    kt, _, _ = sample_kb
    answer = kt.tree("sample").ask(
        "Which database did the team choose, and on which days are production deploys allowed?"
    )
    files = {c.file.rsplit("/", 1)[-1] for c in answer.citations}
    assert answer.status == "complete", answer.trace
    assert files == {"meetings.md", "handbook.md"}
    text = (answer.answer or "").lower()
    assert "postgres" in text and "tuesday" in text
    # split in two, each part's evidence found by the index, one answer call per part
    assert answer.trace[0].action == "decompose" and len(answer.parts) == 2
    assert sum(s.outcome.startswith("retrieve:") for s in answer.trace) == 2
    assert answer.usage.calls + answer.usage.cached == 3


def test_unanswerable_question_says_so(sample_kb) -> None:
    kt, _, _ = sample_kb
    answer = kt.tree("sample").ask("What is the street address of Brightline's office in Madrid?")
    assert answer.status == "none"
    assert answer.answer is None and answer.citations == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_openai_compatible_server_end_to_end(tmp_path: Path) -> None:
    """A real llama-cpp-python server on 127.0.0.1 serving the same GGUF, driven via the OpenAI adapter."""
    pytest.importorskip("openai")
    from knowtree.llm.adapters.model_files import ensure_local_model

    gguf = ensure_local_model()
    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "default",
            "--host", "127.0.0.1", "--port", str(port), "--n_threads", "2", "--n_ctx", "4096",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ},
    )
    try:
        base = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the llama-cpp-python server did not start")
            time.sleep(0.5)
        doc = tmp_path / "release.md"
        doc.write_text(
            "# Release 4.2\n\nRelease 4.2 of the Atlas billing service shipped on 14 June 2024. "
            "Nadia Berg was the release manager. The release moved invoice generation to a nightly batch job "
            "and removed the legacy CSV export, which customers had rarely used.\n",
            encoding="utf-8",
        )
        kt = knowtree.open(tmp_path / "kb.db", model=f"openai:default@{base}", api_key="sk-local")
        report = kt.build([str(doc)], tree="srv")
        assert report.usage.calls >= 1
        answer = kt.tree("srv").ask("Who was the release manager of Release 4.2?")
        kt.close()
        assert answer.status == "complete", answer.trace
        assert "nadia" in (answer.answer or "").lower()
        assert answer.citations and answer.citations[0].file.endswith("release.md")
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
