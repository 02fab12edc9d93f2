"""How llama.cpp was built for a given interpreter, and the embedded model's speed with that build.

For the python of a venv (default: this one): llama.cpp's system info (the CPU features compiled in),
then prompt-eval tokens/s (a fixed 500-token prompt evaluated from an empty context) and generation
tokens/s (64 greedy tokens, each evaluated after the prompt), 3 repeats, medians; JSON on stdout.
Compares a portable build with a native one by running it once per venv on the same machine:

    flock /tmp/kt-model.lock .venv/bin/python benchmarks/bench_llama_build.py [--python OTHER/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

#: a fixed text, tokenized and cut to exactly --prompt-tokens tokens
TEXT = (
    "The lighthouse keepers of the northern coast kept a log of every ship that passed the rocks, the "
    "weather at each watch, the state of the lamp and the oil burned through the night. In winter the "
    "storms came from the west and the keepers climbed the stairs every two hours to trim the wick. "
)


def measure(model: str, threads: int, prompt_tokens: int, gen_tokens: int, repeats: int) -> dict[str, Any]:
    import llama_cpp

    from knowtree.llm.adapters import llama_build

    started = time.perf_counter()
    llm = llama_cpp.Llama(
        model_path=model, n_ctx=prompt_tokens + gen_tokens + 64, n_threads=threads, n_threads_batch=threads,
        seed=0, verbose=False,
    )  # fmt: skip
    load_s = time.perf_counter() - started
    tokens = llm.tokenize((TEXT * (prompt_tokens // 40 + 2)).encode(), add_bos=True)[:prompt_tokens]
    prompt_speed: list[float] = []
    gen_speed: list[float] = []
    for _ in range(repeats):
        llm.reset()
        started = time.perf_counter()
        llm.eval(tokens)
        prompt_speed.append(len(tokens) / (time.perf_counter() - started))
        started = time.perf_counter()
        for _ in range(gen_tokens):  # greedy; the end-of-text token does not stop it
            llm.eval([llm.sample(top_k=1, temp=0.0)])
        gen_speed.append(gen_tokens / (time.perf_counter() - started))
    info = llama_cpp.llama_print_system_info()
    info = info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)
    return {
        "python": sys.executable,
        "llama_cpp_version": llama_cpp.__version__,
        "system_info": info.strip(),
        "compiled": sorted(llama_build.parse_system_info(info)),
        "cpu": llama_build.cpu_model(),
        "amx_cpu": "amx_tile" in (llama_build.cpu_flags() or set()),
        "machine": platform.machine(),
        "threads": threads,
        "model": model,
        "load_s": round(load_s, 2),
        "prompt_tokens": len(tokens),
        "gen_tokens": gen_tokens,
        "repeats": repeats,
        "prompt_tok_s": round(statistics.median(prompt_speed), 2),
        "gen_tok_s": round(statistics.median(gen_speed), 2),
        "prompt_tok_s_runs": [round(x, 2) for x in prompt_speed],
        "gen_tok_s_runs": [round(x, 2) for x in gen_speed],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the venv's python whose llama.cpp to measure")
    parser.add_argument("--model", help="GGUF file [default: the embedded model]")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--prompt-tokens", type=int, default=500)
    parser.add_argument("--gen-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.model:
        from knowtree.llm.adapters.model_files import ensure_local_model

        args.model = str(ensure_local_model())
    if args.inner or os.path.realpath(args.python) == os.path.realpath(sys.executable):
        result = measure(args.model, args.threads, args.prompt_tokens, args.gen_tokens, args.repeats)
        print(json.dumps(result, indent=None if args.inner else 2))
        return
    # another venv: run this script there (its llama.cpp), in a subprocess, so a crash is reported
    command = [args.python, __file__, "--inner", "--model", args.model, "--threads", str(args.threads),
               "--prompt-tokens", str(args.prompt_tokens), "--gen-tokens", str(args.gen_tokens),
               "--repeats", str(args.repeats)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{args.python}: the benchmark failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    print(json.dumps(json.loads(done.stdout.strip().splitlines()[-1]), indent=2))


if __name__ == "__main__":
    main()
