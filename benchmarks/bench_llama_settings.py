"""llama.cpp settings for the embedded model: default attention vs `flash_attn=True`, same prompts.

Three ~1,800–2,350-token prompts (windows of this README), each read by both settings in turn (the
prefix cache reset before each call): prompt tokens/s (a 1-token reply) and generation tokens/s (a
96-token greedy reply, its time less the prompt's), and whether the two settings wrote the same reply.
Run under the model lock:

    flock /tmp/kt-model.lock .venv/bin/python benchmarks/bench_llama_settings.py
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

SETTINGS: dict[str, dict[str, Any]] = {"default": {}, "flash_attn": {"flash_attn": True}}


def prompts(count: int = 3, words_each: int = 1200, seed: int = 1) -> list[str]:
    words = (Path(__file__).resolve().parents[1] / "README.md").read_text().split()
    rnd = random.Random(seed)
    out = []
    for _ in range(count):
        i = rnd.randrange(0, len(words) - words_each)
        body = " ".join(words[i : i + words_each])
        out.append(f"Summarize the following text in five sentences.\n\n{body}\n\nSummary:")
    return out


def timed(llm: Any, prompt: str, max_tokens: int) -> tuple[float, dict[str, Any]]:
    llm.reset()  # no prefix reuse between calls
    started = time.perf_counter()
    out = llm.create_completion(prompt, max_tokens=max_tokens, temperature=0)
    return time.perf_counter() - started, out


def main() -> None:
    import llama_cpp

    from knowtree.llm.adapters.model_files import ensure_local_model

    path = str(ensure_local_model())
    llms = {
        name: llama_cpp.Llama(
            model_path=path, n_ctx=8192, n_threads=2, n_threads_batch=2, seed=0, verbose=False, **extra
        )
        for name, extra in SETTINGS.items()
    }
    speed: dict[str, dict[str, list[float]]] = {n: {"pp": [], "tg": []} for n in llms}
    replies: dict[str, list[str]] = {n: [] for n in llms}
    for prompt in prompts():
        for name, llm in llms.items():
            n = len(llm.tokenize(prompt.encode()))
            read, _ = timed(llm, prompt, 1)
            total, out = timed(llm, prompt, 96)
            written = out["usage"]["completion_tokens"] - 1
            speed[name]["pp"].append(n / read)
            speed[name]["tg"].append(written / max(1e-6, total - read))
            replies[name].append(out["choices"][0]["text"])
            print(f"{name}: {n} prompt tokens, {n / read:.1f} tok/s read, {speed[name]['tg'][-1]:.1f} tok/s written")
    for name, s in speed.items():
        print(f"{name}: mean {sum(s['pp']) / len(s['pp']):.1f} tok/s read, {sum(s['tg']) / len(s['tg']):.1f} written")
    same = [a == b for a, b in zip(replies["default"], replies["flash_attn"], strict=True)]
    print("same replies:", same)


if __name__ == "__main__":
    main()
