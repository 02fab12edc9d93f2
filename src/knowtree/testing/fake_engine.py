"""A model-process engine without weights, for testing the model process and its protocol.

`LocalModel(..., engine="knowtree.testing.fake_engine:FakeEngine")` runs it in the worker instead of
llama.cpp. It replies "echo: <last user message>" (streamed word by word) and obeys commands in that
message: `sleep:SECONDS` (a long call, e.g. to kill the worker mid-call), `slowpieces:SECONDS` (a
pause before each streamed piece: a long call that keeps talking), `crash:SIGNAL` (the worker kills
itself with that signal, as a native crash would), `pid` (replies with the worker's pid).
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from typing import Any

from knowtree.errors import ModelCallError
from knowtree.llm.base import Completion, Request


class FakeEngine:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.loaded = 0

    def describe(self) -> dict[str, Any]:
        return {"id": self.config.get("id", "local:fake"), "n_ctx": self.config.get("n_ctx", 0)}

    def load(self) -> None:
        self.loaded += 1

    def complete(self, request: Request, on_text: Callable[[str], None] | None) -> Completion:
        self.load()
        text = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
        if match := re.search(r"sleep:([\d.]+)", text):
            time.sleep(float(match.group(1)))
        if match := re.search(r"crash:(SIG[A-Z]+)", text):
            os.kill(os.getpid(), getattr(signal, match.group(1)))
        if "fail" in text.split():
            raise ModelCallError("the fake engine failed as asked")
        reply = str(os.getpid()) if text == "pid" else f"echo: {text}"
        pieces = [word + " " for word in reply.split(" ")[:-1]] + reply.split(" ")[-1:]
        pause = float(m.group(1)) if (m := re.search(r"slowpieces:([\d.]+)", text)) else 0.0
        if on_text is not None:
            for piece in pieces:
                time.sleep(pause)
                on_text(piece)
        return Completion(
            text="".join(pieces),
            input_tokens=len(text.split()),
            output_tokens=len(pieces),
            finish_reason="stop",
        )

    def close(self) -> None:
        pass
