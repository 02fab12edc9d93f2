"""Property-based run over the OpenAPI schema (schemathesis): generated requests to every operation,
none may get a 5xx or a response that does not match the schema (trees, memories, knowledge bases, jobs)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi")
schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402

import knowtree  # noqa: E402
from conftest import write_corpus  # noqa: E402
from knowtree.server.app import create_app  # noqa: E402
from knowtree.server.config import ServerConfig  # noqa: E402
from knowtree.testing.models import KeywordModel  # noqa: E402
from server_helpers import CHAT  # noqa: E402
from test_kb import write_inputs  # noqa: E402


def _schema() -> object:
    """The app over a small database made once for this module (schemathesis needs the schema at import)."""
    import atexit
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="knowtree-schema-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)  # made at import, so no fixture can remove it
    kt = knowtree.open(root / "kb.db", model=KeywordModel())
    kt.build(write_corpus(root / "docs"), tree="notes")
    kt.memory("chat").add(CHAT)
    (root / "kb").mkdir()
    kt.kb("hp", embedder="hash").build(**write_inputs(root / "kb"))  # the /v1/kbs routes have one to find
    # no job worker: generated builds stay queued (this run tests the API, not the builds)
    app = create_app(kt, ServerConfig(allowed_roots=[root], jobs_worker=False, mcp=False,
                                      trusted_hosts=["127.0.0.1", "localhost", "testserver"]))
    return schemathesis.openapi.from_asgi("/openapi.json", app)


schema = _schema()


@schema.parametrize()
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case: schemathesis.Case) -> None:
    from schemathesis.checks import not_a_server_error

    response = case.call()
    case.validate_response(response, checks=(not_a_server_error,))
