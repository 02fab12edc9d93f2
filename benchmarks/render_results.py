"""Render the recorded benchmark JSON files (benchmarks/results/) as Markdown tables.

The docs site's Results page (docs/results.md) and README's headline table are generated from these
files by docs/hooks/gen.py, which calls `results_page_md()` and `headline_md()`; CI fails when they are
stale, and a table whose results file is missing, or lacks its command, machine or date, fails the build.

.venv/bin/python benchmarks/render_results.py   # prints the Results page's Markdown
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent / "results"


def core(path: Path) -> str:
    data = json.loads(path.read_text(encoding="utf-8"))
    b, s = data["build"], data["summary"]
    lines = [
        f"### Core: {data['benchmark']}",
        "",
        f"Command: `{data['command']}` — model `{data['model']}`, {data['machine']}, {data['date']}.",
        "",
        "| build | value |",
        "|---|---|",
        f"| corpus | {b['documents']} documents, {b['corpus_chars']:,} characters |",
        f"| tree | {b['nodes']} nodes, {b['leaves']} leaves, depth {b['depth']} |",
        f"| wall time | {b['wall_s']:.0f} s |",
        f"| LLM calls | {b['llm_calls']} ({b['cached']} from cache) |",
        f"| tokens | {b['input_tokens']:,} in + {b['output_tokens']:,} out |",
        f"| fallback metadata | {b['fallbacks']} nodes |",
        "",
        "| question (doc) | gold | picked | status | nav steps | leaves read | right doc read | LLM calls "
        "(cached) | tokens | read share of corpus | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["questions"]:
        lines.append(
            f"| {r['question'][:60]} ({r['doc']}) | {r['gold']} | {r['picked'] or '-'} | {r['status']} "
            f"| {r['nav_steps']} | {r['leaves_read']} | {'yes' if r['right_doc_read'] else 'no'} | {r['llm_calls']} ({r.get('cached_calls', 0)}) "
            f"| {r['tokens']:,} | {r['read_share_of_corpus']:.1%} | {r['wall_s']:.0f} |"
        )
    lines += [
        "",
        f"Summary: accuracy {s['accuracy']:.0%} over {s['questions']} questions; right document read in "
        f"{s['right_doc_read']:.0%}; statuses {s['status']}; mean {s['mean_nav_steps']} navigation steps, "
        f"{s['mean_tokens']:,} tokens, {s['mean_read_share']:.1%} of the corpus read, {s['mean_wall_s']} s per question.",
    ]
    return "\n".join(lines)


def model_choice(path: Path) -> str:
    data = json.loads(path.read_text(encoding="utf-8"))
    s = data["summary"]
    lines = [
        f"### Model choice: `{s['model']}`",
        "",
        f"Command: `{data['command']}`.",
        "",
        f"- Navigation, 10 clear cases (5 options each, knowtree's choose prompt): **{s['navigation_right']}/"
        f"{s['navigation_cases']}** right, {s['navigation_s_per_case']} s per choice.",
        f"- Leaf status (full walk on one leaf: decomposition, reading, evidence checks): **{s['leaf_status_right']}/"
        f"{s['leaf_cases']}** right — by expected status: {s['by_expected']}; {s['leaf_s_per_case']} s per question.",
        "",
        "| case | expected | got |",
        "|---|---|---|",
    ]
    for r in data["navigation"]:
        lines.append(f"| nav: {r['question']} | {r['expected']} | {r['chosen']} |")
    for r in data["leaf"]:
        lines.append(f"| leaf: {r['question']} | {r['expected']} | {r['status']} |")
    return "\n".join(lines)


def load(name: str) -> dict:
    """A results file with its provenance; a missing file or a missing command / machine / date fails."""
    path = HERE / name
    if not path.is_file():
        raise FileNotFoundError(f"benchmarks/results/{name}: no results file for this table")
    data = json.loads(path.read_text(encoding="utf-8"))
    lacking = [k for k in ("command", "machine", "date") if not data.get(k)]
    if lacking:
        raise ValueError(f"benchmarks/results/{name}: lacks {', '.join(lacking)}")
    return data


def _source(data: dict, *names: str) -> str:
    files = ", ".join(f"`benchmarks/results/{n}`" for n in names)
    return f"Command: `{data['command']}`. Machine: {data['machine']}. Date: {data['date']}. File: {files}."


RETRIEVAL = ("locomo", "hotpotqa", "financebench")
RETRIEVAL_NAMES = {
    "locomo": "LoCoMo (conversations)",
    "hotpotqa": "HotpotQA (paragraphs)",
    "financebench": "FinanceBench (10-K pages)",
}
METHODS = ("bm25", "embedding", "hybrid", "tree")


def _retrieval(dataset: str) -> tuple[dict, str]:
    name = f"tree-index/{dataset}/summary.json"
    return load(name), name


def _best_flat(dataset: str, budget: str, key: str = "hit_by_budget") -> tuple[str, float]:
    """The best `flat-*` ranking of the tree's own pieces at this budget (fair-retrieval/*.json)."""
    methods = load(f"fair-retrieval/{dataset}.json")["methods"]
    return max(((m, s[key][budget]) for m, s in methods.items() if m != "tree" and budget in s[key]),
               key=lambda ms: ms[1])


def retrieval_headline() -> str:
    """Evidence found within the budget: the tree as an index against flat search of whole pages or
    messages (the harness's `bm25`/`embedding`/`hybrid`) and against the best flat ranking of the
    tree's own pieces (`flat-*`), no model call."""
    lines = [
        "| data set (questions) | token budget | BM25 | dense | hybrid | best flat, same pieces "
        "| **knowtree tree index** |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for dataset in RETRIEVAL:
        data, _ = _retrieval(dataset)
        budget = str(data["budget"])
        cells = [f"{data['methods'][m]['hit_by_budget'][budget]:.3f}" for m in METHODS]
        name, best = _best_flat(dataset, budget)
        cells.insert(-1, f"{best:.3f} ({name})")
        cells[-1] = f"**{cells[-1]}**"
        lines.append(
            f"| {RETRIEVAL_NAMES[dataset]} ({data['questions']}) | {int(budget):,} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def retrieval() -> str:
    parts = [
        "## Retrieval: the tree as an index against flat search",
        "",
        "Share of questions with gold evidence within B tokens read (hit@B), no model call anywhere; "
        "`tree` is what `knowtree ask --mode retrieve --no-answer` returns. Dev sets, every question.",
        "",
        retrieval_headline(),
        "",
    ]
    for dataset in RETRIEVAL:
        data, name = _retrieval(dataset)
        budgets = list(data["methods"]["tree"]["hit_by_budget"])
        parts += [
            f"### {RETRIEVAL_NAMES[dataset]}: hit@B by budget",
            "",
            "| method | " + " | ".join(f"hit@{b}" for b in budgets) + " |",
            "|---|" + "---:|" * len(budgets),
        ]
        for m in METHODS:
            hits = data["methods"][m]["hit_by_budget"]
            parts.append(f"| {m} | " + " | ".join(f"{hits[b]:.3f}" for b in budgets) + " |")
        parts += ["", _source(data, name), ""]
    return "\n".join(parts)


FAIR_METRIC = {"locomo": "hit_by_budget", "hotpotqa": "all_hit_by_budget", "financebench": "hit_by_budget"}
FAIR_LABEL = {"hit_by_budget": "hit", "all_hit_by_budget": "all"}
FAIR_BUDGETS = ("512", "1024", "2048", "4096")


def fair_retrieval() -> str:
    """`tree` against flat rankings of the same pieces (`flat-*`), every budget, with their costs."""
    parts = [
        "## Retrieval at the same unit: `tree` against flat rankings of its own pieces",
        "",
        "The `flat-*` methods rank exactly the ~400-character pieces `tree` indexes, with no tree "
        "(`src/knowtree_eval/flatpieces.py`): BM25, dense (the run's embedder), fused (0.3 × BM25/max + "
        "0.7 × min-max cosine) and reciprocal-rank fusion; `-ctx`: each piece indexed with its context. "
        "Only the pieces' text is counted against the budget. LoCoMo and FinanceBench: any gold evidence "
        "within B tokens (hit@B); HotpotQA: every gold paragraph (all@B). Best flat method per budget in bold "
        "when it beats `tree`.",
        "",
    ]
    for dataset in RETRIEVAL:
        name = f"fair-retrieval/{dataset}.json"
        data = load(name)
        key = FAIR_METRIC[dataset]
        label = FAIR_LABEL[key]
        methods = data["methods"]
        best = {
            b: max((s[key].get(b, 0.0) for m, s in methods.items() if m != "tree"), default=0.0)
            for b in FAIR_BUDGETS
        }
        parts += [
            f"### {RETRIEVAL_NAMES[dataset]}: {label}@B, {data['questions']} questions, embedder {data['embedder']}",
            "",
            "| method | " + " | ".join(f"{label}@{b}" for b in FAIR_BUDGETS) + " | setup s | ms / question |",
            "|---|" + "---:|" * (len(FAIR_BUDGETS) + 2),
        ]
        for m, s in methods.items():
            cells = []
            for b in FAIR_BUDGETS:
                v = s[key].get(b)
                text = "–" if v is None else f"{v:.3f}"
                if m != "tree" and v is not None and v == best[b] and v > methods["tree"][key].get(b, 0.0):
                    text = f"**{text}**"
                cells.append(text)
            wall = s.get("wall_s_mean") or 0.0
            parts.append(
                f"| {m} | " + " | ".join(cells) + f" | {s.get('setup_s', 0.0):.0f} | {wall * 1000:.0f} |"
            )
        costs = data.get("costs") or {}
        if costs:
            parts += [
                "",
                "Costs: " + "; ".join(f"{k.replace('_', ' ')} {v:g}" for k, v in costs.items()) + ".",
            ]
        parts += ["", _source(data, name), ""]
    return "\n".join(parts)


def memory() -> str:
    names = ("memory_index_conv-26_s1-3.json", "memory_index_conv-41_s1-3.json")
    rows = [(n, load(n)) for n in names]
    lines = [
        "## Conversation memory: the index (the default) against the navigator",
        "",
        "LoCoMo conversations, sessions 1-3, every question with evidence there (stratified), embedded "
        "model, 800 tokens read; graded by hand against the gold answer and by the same model as judge. "
        "`retrieve` (the index + the memory answer step) is what `auto` does on a memory.",
        "",
        "| conversation | questions | `retrieve` right (hand / judged) | navigator `walk` right (hand / judged) |",
        "|---|---:|---:|---:|",
    ]
    for _, d in rows:
        s = d["summary"]
        lines.append(
            f"| {d['conversation']} sessions {d['sessions']} | {s['retrieve']['questions']} | "
            f"{s['retrieve']['by_hand']} / {s['retrieve']['judged']} | {s['tree']['by_hand']} / {s['tree']['judged']} |"
        )
    lines.append("")
    lines += [_source(d, n) for n, d in rows]
    return "\n".join(lines) + "\n"


def server_load() -> str:
    name = "serve_load_restructured.json"
    d = load(name)
    lines = [
        f"## Server under load: {d['clients']} concurrent clients",
        "",
        "`knowtree serve` (one process, keyword model, the sample tree and 8 memories); a fixed mix of "
        "retrieve, show, ask and add.",
        "",
        "| op | requests | p50 ms | p99 ms |",
        "|---|---:|---:|---:|",
    ]
    for op, o in d["ops"].items():
        lines.append(f"| {op} | {o['n']:,} | {o['p50_ms']:,.0f} | {o['p99_ms']:,.0f} |")
    lines += [
        f"| **all** | **{d['requests_ok']:,} in {d['seconds']} s = {d['throughput_rps']} req/s** | | "
        f"**{d['errors']} errors** |",
        "",
        f"Server CPU per request: {d['server_cpu_ms_per_request']} ms.",
        "",
        _source(d, name),
        "",
    ]
    return "\n".join(lines)


def chat_scale() -> str:
    name = "chat_scale.json"
    d = load(name)
    lines = [
        "## Conversation import at scale",
        "",
        "`chat add` with the instant keyword model (what is timed is knowtree's own work), into an empty "
        "database and into one holding other trees; then `Memory.context` (no model call).",
        "",
        "| messages | database | import s | msg/s | depth | nodes | longest write ms | context, first s | context, after s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in d["rows"]:
        lines.append(
            f"| {r['messages']:,} | {r['db']} | {r['seconds']} | {r['messages_per_s']:,.0f} | {r['depth']} | "
            f"{r['nodes']:,} | {r['longest_write_ms']} | {r['context_first_s']} | {r['context_s']} |"
        )
    lines += ["", _source(d, name), ""]
    return "\n".join(lines)


def crash() -> str:
    names = (
        "crash_campaign_run1.json",
        "crash_campaign_chat_slow.json",
        "crash_campaign_build_keyword_large.json",
    )
    runs = [(n, load(n)) for n in names]
    lines = [
        "## Crash campaign: SIGKILL during `build` and `chat add`",
        "",
        "Each trial kills the command at a random point (up to 3 times in a row), runs it to the end and "
        "checks that no finished model call is repeated, nothing is lost or duplicated and the database is intact.",
        "",
        "| file | command | model | kills | kills mid-work | trials | problems |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for n, d in runs:
        for r in d["results"]:
            lines.append(
                f"| `{n}` | {r['command']} | {r['model']} | {r['kills']} | {r['kills_mid_work']} | {r['trials']} | "
                f"{len(r['problems'])} |"
            )
    lines += [
        "",
        "The problems of the first `chat add` / `slow:0.1` pass were runs left marked `running` in the runs "
        "table after a kill; `knowtree ledger` showed them as interrupted, and the check now reads the "
        "ledger's view (the lab notebook has the details).",
        "",
    ]
    lines += [_source(d, n) for n, d in runs]
    return "\n".join(lines) + "\n"


def knowledge_bases() -> str:
    names = ("autokb_tv_keyword.json", "autokb_medical_keyword.json")
    runs = [(n, load(n)) for n in names]
    lines = [
        "## Knowledge bases: matching a user's issue (AutoKB)",
        "",
        "HitRate@k of the right issue for every dev query; the KB built with the keyword model (clustering, "
        "indexing and matching are the real code), against flat search over the raw issues and chunks.",
        "",
        "| domain (queries) | method | @1 | @3 | @5 |",
        "|---|---|---:|---:|---:|",
    ]
    for _, d in runs:
        for method, hits in d["hit_rate"].items():
            lines.append(
                f"| {d['domain']} ({d['queries']}) | {method} | {hits['@1']:.3f} | {hits['@3']:.3f} | {hits['@5']:.3f} |"
            )
    lines += [
        "",
        "| domain | raw issues | clusters | chunks | model calls | calls / raw issue | build s | embedder |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for _, d in runs:
        s, b = d["stats"], d["build"]
        lines.append(
            f"| {d['domain']} | {s['raw_issues']:,} | {s['clusters']:,} | {s['chunks']:,} | {b['calls']} | "
            f"{b['calls_per_raw_issue']} | {b['wall_s']} | `{d['embedder']}` |"
        )
    lines.append("")
    lines += [_source(d, n) for n, d in runs]
    return "\n".join(lines) + "\n"


def embedded_model() -> str:
    name = "model_choice_local.json"
    d = load(name)
    s = d["summary"]
    lines = [
        "## The embedded model: does it navigate?",
        "",
        f"`{s['model']}` through knowtree's own prompts and evidence checks.",
        "",
        "| test | right | seconds each |",
        "|---|---:|---:|",
        f"| navigation: pick the right child of 5 | {s['navigation_right']}/{s['navigation_cases']} | {s['navigation_s_per_case']} |",
        f"| leaf status (complete / partial / none) | {s['leaf_status_right']}/{s['leaf_cases']} | {s['leaf_s_per_case']} |",
        "",
        _source(d, name),
        "",
    ]
    return "\n".join(lines)


SECTIONS = (
    retrieval,
    fair_retrieval,
    memory,
    knowledge_bases,
    server_load,
    chat_scale,
    crash,
    embedded_model,
)


def results_page_md() -> str:
    """The docs site's Results page: every table from a results file, each with its command, machine, date."""
    intro = [
        "# Results",
        "",
        "The current numbers, each table generated from a JSON file in `benchmarks/results/` (so none is "
        "typed by hand) with the command that made it, the machine and the date. Data sets are the dev "
        "splits in the project's shared data (not in the repository). How each run was done, and every "
        "earlier measurement, is in the [lab notebook](results-archive.md); runs recorded there without a "
        "results file (the QuALITY accuracy runs among them) are not repeated here.",
        "",
    ]
    return "\n".join(intro) + "\n" + "\n".join(section() for section in SECTIONS)


def headline_md() -> str:
    """README's headline table."""
    data, _ = _retrieval(RETRIEVAL[0])
    return (
        "Evidence found within the token budget, no model call (share of dev questions; "
        f"[all results](docs/results.md), measured {data['date']}). BM25, dense and hybrid rank whole "
        "pages or messages; \"best flat, same pieces\" ranks the tree's own ~400-character pieces "
        "without the tree (the fairer baseline: on FinanceBench it is ahead):\n\n" + retrieval_headline()
    )


def main() -> None:
    print(results_page_md())


if __name__ == "__main__":
    main()
