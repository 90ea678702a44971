"""The learning-curve PNG and the end-of-run summary table."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.table import Table


def learning_curve(
    path: str | os.PathLike[str],
    evals: Sequence[Mapping[str, Any]],
    train: Sequence[tuple[int, float | None]] = (),
    *,
    title: str = "",
) -> Path:
    """Score vs update: held-out evaluation (with its valid-reply and correct-answer rates where the family reports
    them) and the mean judge score of each batch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    if evals:
        xs = [e["update"] for e in evals]
        ax.errorbar(
            xs, [e["score"] for e in evals], yerr=[e.get("score_sd", 0) for e in evals], marker="o", capsize=3,
            label="held-out score (first reply)",
        )  # fmt: skip
        if all("valid_rate" in e for e in evals):
            ax.plot(xs, [e["valid_rate"] for e in evals], "--", marker=".", alpha=0.7, label="valid-reply rate")
        if all("correct_rate" in e for e in evals):
            ax.plot(xs, [e["correct_rate"] for e in evals], ":", marker="x", alpha=0.8, label="answer correct")
        if all("accepted_rate" in e for e in evals):
            ax.plot(xs, [e["accepted_rate"] for e in evals], "-.", marker="s", alpha=0.8, label="accepted by the user")
    points = [(u, s) for u, s in train if s is not None]
    if points:
        ax.plot(*zip(*points, strict=True), alpha=0.5, label="batch mean judge score")
    ax.set_xlabel("update")
    ax.set_ylabel("score")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    if evals or points:
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def summary_table(summary: Mapping[str, Any], title: str = "claw-train") -> Table:
    """What a finished run did: status, updates, samples, masking, judge health, the evaluation curve."""
    counters = summary.get("counters", {})
    counts = counters.get("counts", {})
    trainer = counters.get("trainer", {})
    judge = counters.get("judge") or {}
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("status", f"{summary['status']}: {summary['message']}")
    table.add_row("updates", str(summary["updates"]))
    table.add_row("wall time", f"{summary['wall_time']:.1f} s")
    if summary.get("peak_memory_mb") is not None:
        table.add_row("peak memory", f"{summary['peak_memory_mb']:,} MB resident")
    table.add_row(
        "episodes", f"{summary.get('episodes', 0)} with a logged turn, {summary.get('episodes_finished', 0)} ended"
    )
    if summary.get("episodes_idle"):
        table.add_row("[yellow]episodes with no action carried out[/yellow]", str(summary["episodes_idle"]))
    table.add_row(
        "turns",
        f"{summary.get('turns', 0)} played, {summary.get('turns_judged', 0)} decided, "
        f"{summary.get('turns_scored', 0)} scored by the judge",
    )
    table.add_row("samples", f"{summary.get('samples', 0)} accepted, {summary.get('samples_trained', 0)} trained")
    masked = summary.get("masked", {})
    table.add_row("turns masked", ", ".join(f"{k} {v}" for k, v in sorted(masked.items())) or "0")
    if degenerate := summary.get("degenerate"):
        table.add_row("degenerate turns", ", ".join(f"{k} {v}" for k, v in sorted(degenerate.items())))
    if summary.get("mean_judge_score") is not None:
        positive = summary.get("judge_positive_rate")
        share = f"  ({positive:.0%} scored +1)" if positive is not None else ""
        table.add_row("mean judge score", f"{summary['mean_judge_score']:+.3f}{share}")
    success = summary.get("success_name", "success")
    if summary.get("mean_outcome") is not None:
        table.add_row(
            "ended episodes",
            f"mean outcome {summary['mean_outcome']:+.3f}, {success} {summary['success_rate']:.0%} "
            f"of {summary['episodes_with_outcome']}",
        )
    table.add_row("stale samples dropped", str(trainer.get("stale_dropped", 0)))
    table.add_row("NaN steps skipped", str(trainer.get("nan_skipped", 0)))
    scored, hints = summary.get("turns_scored", counts.get("judged", 0)), summary.get("hints", counts.get("hints", 0))
    if scored:
        table.add_row("hints accepted", f"{hints} of {scored} scored turns ({hints / scored:.0%})")
    if judge.get("unavailable") or counts.get("judge_unavailable"):
        table.add_row("[yellow]judge unavailable[/yellow]", str(counts.get("judge_unavailable", 0)))
    for e in summary.get("evals", []):
        table.add_row(
            f"eval @ update {e['update']}",
            f"{e['score']:.3f} ± {e.get('score_sd', 0):.3f}  ({e.get('success_name', success)} "
            f"{e.get('success_rate', 0):.0%}"
            + (f", valid {e['valid_rate']:.0%}" if "valid_rate" in e else "")
            + (f", correct {e['correct_rate']:.0%}" if "correct_rate" in e else "")
            + (f", accepted {e['accepted_rate']:.0%})" if "accepted_rate" in e else ")"),
        )
    paths = summary.get("paths", {})
    if summary.get("checkpoint"):
        table.add_row("checkpoint", str(summary["checkpoint"]))
    for key in ("logs", "tensorboard", "learning_curve"):
        if key in paths:
            table.add_row(key.replace("_", " "), paths[key])
    return table
