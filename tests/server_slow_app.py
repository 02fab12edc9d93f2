"""`python server_slow_app.py DB PORT ROOT LOG [DELAY]`: knowtree serve with a slow KeywordModel that logs
every finished model call (its cache key) to LOG — the live-server test kills and restarts it."""

from __future__ import annotations

import sys
import time
from typing import Any

import uvicorn

import knowtree
from knowtree.server.app import create_app
from knowtree.server.config import ServerConfig
from knowtree.testing.models import KeywordModel


class SlowKeywordModel(KeywordModel):
    def __init__(self, log: str, delay: float) -> None:
        super().__init__()
        self.log = log
        self.delay = delay

    def complete(self, request: Any) -> Any:
        time.sleep(self.delay)
        out = super().complete(request)
        with open(self.log, "a", encoding="utf-8") as f:
            f.write(request.cache_key(self.id) + "\n")
        return out


def main() -> None:
    db, port, root, log = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    delay = float(sys.argv[5]) if len(sys.argv) > 5 else 0.25
    kt = knowtree.open(db, model=SlowKeywordModel(log, delay), chunk_size=200, concurrency=2)
    app = create_app(kt, ServerConfig(port=port, allowed_roots=[root]))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
