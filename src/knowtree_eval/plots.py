"""PNG plots for an evaluation run: accuracy vs tokens read, hit rate vs token budget.

matplotlib is an optional extra (`knowtree[eval]`); without it the run still completes and the
summary says why there are no plots. The Agg backend is selected at call time (never on import), so
nothing here touches a display.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ACCURACY_PNG = "accuracy_vs_tokens.png"
HIT_RATE_PNG = "hit_rate_vs_budget.png"


def _answer_metric(s: dict[str, Any]) -> tuple[str, float] | None:
    for key, label in (("accuracy", "accuracy"), ("judged", "judged accuracy"), ("f1", "token F1")):
        if s.get(key) is not None:
            return label, float(s[key])
    return None


def write_plots(summary: dict[str, Any], out: str | Path) -> dict[str, Any]:
    """Write the plots that apply to this run into `out`; returns {"files": [...], "note": str|None}."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        return {"files": [], "note": 'not drawn: matplotlib is not installed (pip install "knowtree[eval]")'}
    out = Path(out)
    files: list[str] = []
    methods: dict[str, Any] = summary["methods"]
    title = f"knowtree eval: {summary.get('kind', '')} ({summary.get('questions', '?')} questions)"

    points = {n: (_answer_metric(s), s.get("tokens_read_mean") or 0.0) for n, s in methods.items()}
    points = {n: (m, t) for n, (m, t) in points.items() if m is not None}
    if points:
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
        for name, ((label, value), tokens) in points.items():
            calls = methods[name].get("llm_calls_mean") or 0
            ax.scatter([tokens], [value], s=60)
            ax.annotate(
                f"{name} ({label}, {calls:.1f} calls/q)",
                (tokens, value),
                textcoords="offset points",
                xytext=(6, 4),
                fontsize=8,
            )
        ax.set_xlabel("corpus tokens read per question (mean)")
        ax.set_ylabel("accuracy (or judged accuracy / F1 where noted)")
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
        ax.set_title(title, fontsize=10)
        fig.tight_layout()
        fig.savefig(out / ACCURACY_PNG)
        plt.close(fig)
        files.append(ACCURACY_PNG)

    curves = {n: s["hit_by_budget"] for n, s in methods.items() if s.get("hit_by_budget")}
    singles = {
        n: (s.get("tokens_read_mean") or 0.0, s["hit_rate"])
        for n, s in methods.items()
        if not s.get("hit_by_budget") and s.get("hit_rate") is not None
    }
    if curves or singles:
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
        for name, curve in curves.items():
            budgets = sorted(int(b) for b in curve)
            ax.plot(
                budgets, [curve[b] if b in curve else curve[str(b)] for b in budgets], marker="o", label=name
            )
        for name, (tokens, hit) in singles.items():
            ax.scatter([tokens], [hit], marker="s", s=50, label=f"{name} (what it read)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("token budget (tokens of retrieved text read)")
        ax.set_ylabel("evidence hit rate")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_title(title, fontsize=10)
        fig.tight_layout()
        fig.savefig(out / HIT_RATE_PNG)
        plt.close(fig)
        files.append(HIT_RATE_PNG)
    return {"files": files, "note": None if files else "no metric to plot in this run"}
