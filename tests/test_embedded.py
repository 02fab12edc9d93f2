"""Integration tests on the real embedded model (few and short: each model call takes seconds on 2 cores).

The model runs in its own process (`knowtree.llm.adapters.local_worker`), never in the test's.
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
    assert "llama_cpp" not in sys.modules  # the model ran in the model process, not in this one
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


def _model_process_of(parent: int, timeout: float) -> int:
    """The pid of `parent`'s embedded-model process, once it has started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"local_worker" in cmdline:
                return int(entry.name)
        time.sleep(0.1)
    raise AssertionError("the server started no model process")


def test_kill_9_of_the_model_process_mid_question_fails_that_question_only(tmp_path: Path) -> None:
    """Through `knowtree serve` over HTTP: the question whose model process is killed gets one clear
    line (a 502), the server keeps serving, and the next question is answered by a fresh process."""
    corpus = tmp_path / "lighthouse"
    corpus.mkdir()
    for item in SAMPLE.iterdir():
        if item.name.endswith(".md"):
            (corpus / item.name).write_text(item.read_text(encoding="utf-8"), encoding="utf-8")
    db = str(tmp_path / "kb.db")
    cli = [sys.executable, "-c", "from knowtree.cli.app import main; main()"]
    env = {**os.environ, "KNOWTREE_THREADS": "2"}
    subprocess.run([*cli, "build", str(corpus), "--tree", "sample", "--summaries", "none", "--db", db],
                   check=True, env=env, capture_output=True, timeout=300)  # fmt: skip
    port = _free_port()
    server = subprocess.Popen(
        [*cli, "serve", "--db", db, "--port", str(port), "--allow-root", str(tmp_path), "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    question = {"question": "Which database did the team choose for Lighthouse?"}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.3)
        with httpx.Client(timeout=600) as client:
            import threading

            result: dict[str, httpx.Response] = {}
            asking = threading.Thread(
                target=lambda: result.setdefault("r", client.post(f"{base}/v1/trees/sample/ask", json=question))
            )
            asking.start()
            worker = _model_process_of(server.pid, timeout=60)
            time.sleep(3)  # loading or answering
            os.kill(worker, 9)
            asking.join(timeout=120)
            assert not asking.is_alive(), "the killed question hangs"
            failed = result["r"]
            assert failed.status_code == 502, failed.text
            detail = failed.json()["detail"]
            assert "SIGKILL" in detail and "\n" not in detail and "knowtree doctor" in detail
            assert server.poll() is None  # the server never stopped
            answered = client.post(f"{base}/v1/trees/sample/ask", json=question)
        assert answered.status_code == 200, answered.text
        answer = answered.json()
        assert answer["status"] == "complete" and "postgres" in (answer["answer"] or "").lower()
        assert _model_process_of(server.pid, timeout=5) != worker
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
