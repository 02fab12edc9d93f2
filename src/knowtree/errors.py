"""One exception tree, split by who is at fault.

KnowtreeError
├── UserError                 the caller asked for something impossible
│   ├── InputError            a file that cannot be read as text (names the file)
│   ├── ConfigError           an unknown model string, a missing key or extra
│   ├── NotFoundError         no such tree / node
│   └── BudgetExceededError   a --max-calls / --max-tokens / --max-cost cap was reached
├── ModelError                the model or its server misbehaved
│   ├── ModelOutputError      a reply that stayed invalid after bounded repair retries
│   └── ModelCallError        the call itself failed (after retries)
│       └── TransientModelError   worth retrying (429, 5xx, timeout); carries Retry-After
└── StoreError                the database is unusable
"""

from __future__ import annotations


class KnowtreeError(Exception):
    pass


class UserError(KnowtreeError):
    pass


class InputError(UserError):
    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class ConfigError(UserError):
    pass


class NotFoundError(UserError):
    pass


class BudgetExceededError(UserError):
    """A budget cap stopped a build or a question before its next model call; finished calls are
    cached, so the same command with a higher cap resumes."""

    def __init__(self, message: str, *, limit: str = "", used: float = 0, cap: float = 0) -> None:
        self.limit = limit
        self.used = used
        self.cap = cap
        super().__init__(message)


class ModelError(KnowtreeError):
    pass


class ModelOutputError(ModelError):
    """The model's reply did not validate, even after repair retries."""

    def __init__(self, message: str, raw: str = "", attempts: int = 0, usage: object = None) -> None:
        self.raw = raw
        self.attempts = attempts
        self.usage = usage  # the `Usage` the failed attempts cost, so answers account for them
        super().__init__(message)


class ModelCallError(ModelError):
    pass


class TransientModelError(ModelCallError):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class StoreError(KnowtreeError):
    pass
