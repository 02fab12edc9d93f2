"""Property-based fuzzing over the OpenAPI schema (schemathesis): generated requests to every operation
(trees, memories, knowledge bases, jobs), one at a time and as stateful sequences that feed one
response into the next request (links inferred from the schema: a build's job id to the job routes, a
memory's name to its messages...). Every response is checked with all of schemathesis's checks: no
5xx, a documented status and content type, a body that matches the schema, valid data accepted,
invalid data rejected.

Budget: `KT_FUZZ_EXAMPLES` examples per operation (8 by default: ~30 s on 2 cores) and
`KT_FUZZ_STEPS` stateful runs; derandomized under CI (the `CI` variable, or `KT_FUZZ_DERANDOMIZE=1`),
so a CI run repeats. `KT_FUZZ_REPORT=FILE` writes the number of requests and their statuses there
(`benchmarks/RESULTS.md` records a large run).
"""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.config import SchemathesisConfig  # noqa: E402

import knowtree  # noqa: E402
from conftest import write_corpus  # noqa: E402
from knowtree.server.app import create_app  # noqa: E402
from knowtree.server.config import ServerConfig  # noqa: E402
from knowtree.testing.models import KeywordModel  # noqa: E402
from server_helpers import CHAT  # noqa: E402
from test_kb import write_inputs  # noqa: E402

EXAMPLES = int(os.environ.get("KT_FUZZ_EXAMPLES", "8"))
STATEFUL_RUNS = int(os.environ.get("KT_FUZZ_STEPS", str(max(10, EXAMPLES * 2))))
DERANDOMIZE = bool(os.environ.get("CI") or os.environ.get("KT_FUZZ_DERANDOMIZE"))
STATUSES: collections.Counter[int] = collections.Counter()
OPERATIONS: collections.Counter[str] = collections.Counter()

# What a schema-valid request may still get: the schema cannot state every rule (a timestamp that
# does not parse, an uploaded file's content, a mode a memory does not take, a tenant's shorter
# names, a knowledge base that exists). Server errors are never in it.
ACCEPTED_REJECTIONS = ["2xx", "400", "401", "403", "404", "409", "413", "415", "422", "429"]
# How invalid data may be refused: schemathesis's list (without 5xx), and 413 for a body over the
# server's limit (a string past its maxLength can make one).
REJECTIONS = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]
CONFIG = SchemathesisConfig.from_dict({
    "checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTED_REJECTIONS},
               "negative_data_rejection": {"expected-statuses": REJECTIONS}},
    "phases": {"stateful": {"enabled": True}},
})


def _schema() -> Any:
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
    # no job worker: generated builds stay queued (this run tests the API, not the builds); no rate
    # limit in the way of thousands of requests
    app = create_app(kt, ServerConfig(allowed_roots=[root], jobs_worker=False, mcp=False, rate_burst=10**6,
                                      trusted_hosts=["127.0.0.1", "localhost", "testserver"]))
    return schemathesis.openapi.from_asgi("/openapi.json", app, config=CONFIG)


schema = _schema()
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE, database=None,
                suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module", autouse=True)
def _report() -> Any:
    yield
    target = os.environ.get("KT_FUZZ_REPORT")
    if target:
        Path(target).write_text(json.dumps({
            "requests": sum(STATUSES.values()), "server_errors": sum(n for s, n in STATUSES.items() if s >= 500),
            "statuses": dict(sorted(STATUSES.items())), "operations": dict(sorted(OPERATIONS.items())),
            "examples_per_operation": EXAMPLES,
            "stateful_runs": STATEFUL_RUNS, "derandomized": DERANDOMIZE,
        }, indent=1))


@schema.parametrize()
@FUZZ
def test_every_operation(case: schemathesis.Case) -> None:
    response = case.call()
    STATUSES[response.status_code] += 1
    OPERATIONS[case.operation.label] += 1
    case.validate_response(response)  # every check: not_a_server_error, response_schema_conformance, ...


FAILURES: list[str] = []  # the stateful run's check failures


class Workflow(schema.as_state_machine()):  # type: ignore[misc]
    def after_call(self, response: Any, case: Any) -> None:
        super().after_call(response, case)
        STATUSES[response.status_code] += 1
        OPERATIONS[case.operation.label] += 1

    def validate_response(self, response: Any, case: Any, *args: Any, **kwargs: Any) -> None:
        try:
            super().validate_response(response, case, *args, **kwargs)  # every check
        except BaseException as exc:
            FAILURES.append(f"{case.operation.label} -> {response.status_code}: {exc}\n{case.as_curl_command()[:2000]}")
            raise


def test_stateful_sequences() -> None:
    """Sequences of calls following the links (a created memory is read, a build's job is cancelled...).
    The server's state outlives each sequence, so Hypothesis may find that replaying a sequence draws
    differently (`Flaky`); as in schemathesis's own stateful engine, that fails the test only when a
    check failed."""
    from hypothesis.errors import Flaky
    from hypothesis.stateful import run_state_machine_as_test

    try:
        run_state_machine_as_test(Workflow, settings=settings(FUZZ, max_examples=STATEFUL_RUNS, stateful_step_count=6))
    except Flaky:
        assert not FAILURES, "\n\n".join(FAILURES)
    assert not FAILURES, "\n\n".join(FAILURES)


def test_the_stateful_run_has_links_to_follow() -> None:
    """The state machine is not empty: producers (builds, adds, creates) lead to their consumers."""
    transitions = schema.statistic.transitions
    assert transitions.total >= 10, transitions
