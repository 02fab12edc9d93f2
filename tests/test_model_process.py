"""The embedded model's process, with a fake engine (no weights): replies, streaming, crashes of the
model process (one-line `ModelCallError`, the next call works), no orphans, a shared socket."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from knowtree.errors import ConfigError, ModelCallError
from knowtree.llm.adapters import local
from knowtree.llm.adapters.llama_build import exit_cause
from knowtree.llm.adapters.local import LocalModel
from knowtree.llm.base import Message, Request

FAKE = "knowtree.testing.fake_engine:FakeEngine"
#: for the subprocesses of these tests: the knowtree under test, whatever the working directory
SRC = str(Path(local.__file__).resolve().parents[3])
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)}
_REAL_ENSURE_LOADED = LocalModel._ensure_loaded  # conftest forbids it (the real model); the fake is fine


@pytest.fixture(autouse=True)
def _fake_engine_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LocalModel, "_ensure_loaded", _REAL_ENSURE_LOADED)


def _ask(text: str) -> Request:
    return Request(messages=[Message(role="user", content=text)])


def _gguf(tmp_path: Path) -> str:
    path = tmp_path / "fake-model.gguf"
    path.write_bytes(b"GGUF")
    return str(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def model(tmp_path: Path):
    m = LocalModel(_gguf(tmp_path), engine=FAKE, n_threads=1)
    yield m
    m.close()


def test_reply_streaming_and_errors_come_back_from_the_model_process(model: LocalModel) -> None:
    reply = model.complete(_ask("hello there"))
    assert reply.text == "echo: hello there" and reply.finish_reason == "stop" and reply.input_tokens == 2
    assert model.worker_pid not in (None, os.getpid())
    pieces: list[str] = []
    streamed = model.complete_streaming(_ask("a b c"), pieces.append)
    assert pieces == ["echo: ", "a ", "b ", "c"] and streamed.text == "".join(pieces)
    with pytest.raises(ModelCallError, match="the fake engine failed as asked"):
        model.complete(_ask("please fail"))
    assert model.complete(_ask("again")).text == "echo: again"  # an engine error leaves the worker up


def test_kill_9_mid_call_is_one_line_naming_the_signal_and_the_next_call_works(model: LocalModel) -> None:
    model.load()
    pid = model.worker_pid
    assert pid is not None
    threading.Timer(0.5, os.kill, (pid, signal.SIGKILL)).start()
    started = time.monotonic()
    with pytest.raises(ModelCallError) as caught:
        model.complete(_ask("sleep:30"))
    message = str(caught.value)
    assert time.monotonic() - started < 10
    assert "\n" not in message and "SIGKILL" in message and "died" in message and "knowtree doctor" in message
    after = model.complete(_ask("pid"))
    assert int(after.text) == model.worker_pid != pid


@pytest.mark.parametrize("sig", ["SIGSEGV", "SIGILL"])
def test_a_native_crash_of_the_model_process_names_its_signal(model: LocalModel, sig: str) -> None:
    with pytest.raises(ModelCallError, match=sig) as caught:
        model.complete(_ask(f"crash:{sig}"))
    assert "\n" not in str(caught.value)
    assert model.complete(_ask("still here")).text == "echo: still here"


def test_close_stops_the_model_process(model: LocalModel) -> None:
    model.load()
    pid = model.worker_pid
    assert pid is not None and _alive(pid)
    model.close()
    assert _gone_within(pid, 5) and model.worker_pid is None
    assert model.complete(_ask("back")).text == "echo: back"  # a later call starts a new one


def test_parent_killed_mid_call_leaves_no_orphan(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from knowtree.llm.adapters.local import LocalModel\n"
        "from knowtree.llm.base import Message, Request\n"
        f"m = LocalModel({_gguf(tmp_path)!r}, engine={FAKE!r}, n_threads=1)\n"
        "m.load(); print(m.worker_pid, flush=True)\n"
        "m.complete(Request(messages=[Message(role='user', content='sleep:60')]))\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert parent.stdout is not None
        worker = int(parent.stdout.readline())
        assert _alive(worker)
        time.sleep(0.3)  # the call is under way
        parent.kill()
        parent.wait()
        assert _gone_within(worker, 5), "the model process outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_the_worker_process_refuses_to_start_without_a_config() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "knowtree.llm.adapters.local_worker"], capture_output=True, text=True, timeout=60, env=ENV
    )
    assert done.returncode == 2 and "--config" in done.stderr


@pytest.fixture
def shared(tmp_path: Path):
    """A shared model process on a Unix socket, as `knowtree model serve --socket` runs it."""
    sock = tmp_path / "model.sock"

    def start() -> subprocess.Popen[str]:
        config = {"id": "local:fake-model", "n_ctx": 1024}
        proc = subprocess.Popen(
            [sys.executable, "-m", "knowtree.llm.adapters.local_worker", "--engine", FAKE,
             "--config", json.dumps(config), "--socket", str(sock)],
            stdout=subprocess.PIPE, text=True, env=ENV,
        )  # fmt: skip
        assert proc.stdout is not None and proc.stdout.readline().startswith("ready")
        return proc

    procs: list[subprocess.Popen[str]] = []

    def starter() -> subprocess.Popen[str]:
        procs.append(start())
        return procs[-1]

    yield sock, starter
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)


def test_two_clients_share_one_model_process_one_call_at_a_time(tmp_path: Path, shared) -> None:
    sock, start = shared
    server = start()
    assert os.stat(sock).st_mode & 0o777 == 0o600
    first = LocalModel(_gguf(tmp_path), engine=FAKE, socket=str(sock))
    second = LocalModel(_gguf(tmp_path), engine=FAKE, socket=str(sock))
    try:
        assert first.complete(_ask("pid")).text == second.complete(_ask("pid")).text == str(server.pid)
        replies: list[str] = []
        started = time.monotonic()
        threads = [
            threading.Thread(target=lambda m=m: replies.append(m.complete(_ask("sleep:0.6")).text))
            for m in (first, second)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(replies) == 2 and time.monotonic() - started >= 1.2  # served one after the other
        pieces: list[str] = []
        assert second.complete_streaming(_ask("x y"), pieces.append).text == "echo: x y" == "".join(pieces)
        server.kill()
        server.wait()
        with pytest.raises(ModelCallError) as caught:
            first.complete(_ask("hello"))
        assert "\n" not in str(caught.value) and str(sock) in str(caught.value)
        replacement = start()
        assert first.complete(_ask("pid")).text == str(replacement.pid)  # reconnected
    finally:
        first.close()
        second.close()
    assert server.poll() is not None


def test_the_socket_comes_from_the_environment_and_must_serve_the_same_model(
    tmp_path: Path, shared, monkeypatch: pytest.MonkeyPatch
) -> None:
    sock, start = shared
    monkeypatch.setenv(local.SOCKET_ENV, str(sock))
    other = tmp_path / "other-model.gguf"
    other.write_bytes(b"GGUF")
    missing = LocalModel(str(other), engine=FAKE)
    with pytest.raises(ModelCallError, match="knowtree model serve --socket"):
        missing.complete(_ask("hi"))
    start()
    with pytest.raises(ConfigError, match="serves local:fake-model, not local:other-model"):
        missing.complete(_ask("hi"))


def test_a_second_server_on_a_live_socket_is_refused(shared) -> None:
    sock, start = shared
    start()
    done = subprocess.run(
        [sys.executable, "-m", "knowtree.llm.adapters.local_worker", "--engine", FAKE, "--config", "{}",
         "--socket", str(sock)],
        capture_output=True, text=True, timeout=60, env=ENV,
    )  # fmt: skip
    assert done.returncode != 0 and "already listening" in done.stderr


def test_exit_causes_are_named() -> None:
    assert exit_cause(-9).startswith("SIGKILL") and exit_cause(-11).startswith("SIGSEGV")
    assert "CPU features" in exit_cause(-4) and exit_cause(3) == "exit code 3"


def test_kill_9_mid_question_through_the_http_api_is_a_502_line_and_the_next_question_works(
    tmp_path: Path,
) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    import knowtree
    from knowtree.server.app import create_app
    from knowtree.server.config import ServerConfig

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "db.md").write_text("# Database\n\nThe team chose Postgres for Lighthouse.\n")
    model = LocalModel(_gguf(tmp_path), engine=FAKE)
    kt = knowtree.open(tmp_path / "kb.db", model=model, summaries="none")
    try:
        kt.build([str(docs)], tree="t")
        client = TestClient(create_app(kt, ServerConfig(allowed_roots=[tmp_path], trusted_hosts=["testserver"])))
        killed: list[int] = []

        def kill_when_started() -> None:
            while model.worker_pid is None:
                time.sleep(0.02)
            time.sleep(0.3)
            killed.append(model.worker_pid)
            os.kill(model.worker_pid, signal.SIGKILL)

        threading.Thread(target=kill_when_started, daemon=True).start()
        failed = client.post("/v1/trees/t/ask", json={"question": "Which database? sleep:30"})
        assert failed.status_code == 502, failed.text
        detail = failed.json()["detail"]
        assert "SIGKILL" in detail and "\n" not in detail and "knowtree doctor" in detail
        answered = client.post("/v1/trees/t/ask", json={"question": "Which database?"})
        assert answered.status_code == 200, answered.text
        assert model.worker_pid not in (None, *killed)
    finally:
        kt.close()
    assert model.worker_pid is None  # closing the knowtree stopped the model process


def test_a_hung_call_is_stopped_after_the_timeout_in_one_line_and_the_next_call_works(tmp_path: Path) -> None:
    m = LocalModel(_gguf(tmp_path), engine=FAKE, n_threads=1, timeout=1.0)
    try:
        m.load()
        pid = m.worker_pid
        assert pid is not None
        started = time.monotonic()
        with pytest.raises(ModelCallError) as caught:
            m.complete(_ask("sleep:60"))  # a process that never answers
        message = str(caught.value)
        assert time.monotonic() - started < 10
        assert "\n" not in message and "no reply for 1 s" in message and "KNOWTREE_MODEL_TIMEOUT" in message
        assert _gone_within(pid, 5)  # stopped, not left behind
        after = m.complete(_ask("pid"))
        assert int(after.text) == m.worker_pid != pid
    finally:
        m.close()


def test_streamed_pieces_keep_a_long_call_alive(tmp_path: Path) -> None:
    """The timeout counts silence, not the call's length: a reply streaming pieces more often than the
    timeout is not stopped."""
    m = LocalModel(_gguf(tmp_path), engine="knowtree.testing.fake_engine:FakeEngine", n_threads=1, timeout=1.0)
    try:
        pieces: list[str] = []
        reply = m.complete_streaming(_ask("slowpieces:0.4 " + " ".join(f"w{i}" for i in range(6))), pieces.append)
        assert reply.text.startswith("echo: ") and len(pieces) >= 7
    finally:
        m.close()
