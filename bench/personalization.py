"""Personalization: Binary RL vs OPD vs Combined on the simulated student, the reference paper's experiment in
miniature (tiny model, CPU).

Every method runs with the same seeds, the same budget (updates of 16 samples) and the same evaluation:
the mean rubric score of the policy's first reply to the same held-out problems, sampled with the same
seed. Prints mean ± sd (over seeds) of the score and the valid-reply rate at each evaluation point,
checks the targets, and writes ``personalization.png`` and ``personalization.json`` to ``--out``.
Each run is a ``claw-train`` process (its run directory is kept under ``--out``).

Run: ``.venv/bin/python bench/personalization.py [--seeds 0 1 2] [--updates 32] [--methods binary opd combined]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CLAW_TRAIN = str(Path(sys.executable).parent / "claw-train")
METHODS = ("binary", "opd", "combined")


def run_one(args: argparse.Namespace, method: str, seed: int) -> dict:
    out = args.out / f"{method}-seed{seed}"
    if (out / "summary.json").exists() and not args.rerun:
        return json.loads((out / "summary.json").read_text())
    if out.exists():
        raise SystemExit(f"{out} holds an unfinished run; remove it or pass another --out")
    config = args.out / f"{method}-seed{seed}.yaml"
    points = sorted(set(args.eval_at) | {0})
    config.write_text(
        f"eval_at: {points}\neval_n: {args.eval_n}\neval_seed: {args.eval_seed}\nreport_to: none\n"
        + (f"trainer: {{learning_rate: {args.lr}}}\n" if args.lr else "")
    )
    cmd = [
        CLAW_TRAIN, "--env", "conversation", "--persona", "student", "--model", args.model, "--method", method,
        "--updates", str(args.updates), "--seed", str(seed), "--output-dir", str(out), "--config", str(config),
        "--checkpoint-every", str(args.updates), "--no-display",
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode != 0:
        raise SystemExit(f"{method} seed {seed} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    print(f"  {method:>8} seed {seed}: {time.monotonic() - started:6.0f} s  "
          + "  ".join(f"{e['update']}:{e['score']:.3f}" for e in summary["evals"]), flush=True)  # fmt: skip
    return summary


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.pstdev(values) if len(values) > 1 else 0.0


def aggregate(results: dict[str, list[dict]], points: list[int]) -> dict[str, dict[int, dict[str, tuple]]]:
    table: dict[str, dict[int, dict[str, tuple]]] = {}
    for method, runs in results.items():
        table[method] = {}
        for u in points:
            evals = [
                next(e for e in r["evals"] if e["update"] == u)
                for r in runs
                if any(e["update"] == u for e in r["evals"])
            ]
            if evals:
                table[method][u] = {
                    "score": mean_sd([e["score"] for e in evals]),
                    "valid": mean_sd([e["valid_rate"] for e in evals]),
                    "n": len(evals),
                }
    return table


def check_targets(table: dict) -> list[tuple[str, bool, str]]:
    """The issue's targets, each with whether it holds and the numbers behind it."""
    rows = []

    def score(m: str, u: int) -> tuple[float, float] | None:
        return table.get(m, {}).get(u, {}).get("score")

    base = [score(m, 0)[0] for m in table if score(m, 0)]
    if base:
        rows.append(("baseline <= 0.3", max(base) <= 0.3, f"{max(base):.3f}"))
    c16, b8, b16, o16 = score("combined", 16), score("binary", 8), score("binary", 16), score("opd", 16)
    if c16:
        valid = table["combined"][16]["valid"][0]
        rows.append(
            ("combined >= 0.8 at 16, >= 95% valid", c16[0] >= 0.8 and valid >= 0.95, f"{c16[0]:.3f}, {valid:.0%}")
        )
    for u, b in ((8, b8), (16, b16)):
        c = score("combined", u)
        if c and b:
            rows.append((f"combined >= binary + 0.1 at {u}", c[0] >= b[0] + 0.1, f"{c[0]:.3f} vs {b[0]:.3f}"))
    if c16 and o16:
        noise = (c16[1] ** 2 + o16[1] ** 2) ** 0.5
        rows.append(
            (
                "combined not worse than OPD beyond noise (16)",
                c16[0] >= o16[0] - noise,
                f"{c16[0]:.3f} vs {o16[0]:.3f} ± {noise:.3f}",
            )
        )
    return rows


def plot(table: dict, points: list[int], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for method, rows in table.items():
        xs = [u for u in points if u in rows]
        mean = [rows[u]["score"][0] for u in xs]
        sd = [rows[u]["score"][1] for u in xs]
        ax.plot(xs, mean, marker="o", label=method)
        ax.fill_between(
            xs,
            [m - s for m, s in zip(mean, sd, strict=True)],
            [m + s for m, s in zip(mean, sd, strict=True)],
            alpha=0.15,
        )
    ax.set_xlabel("update (16 samples each)")
    ax.set_ylabel("personalization score (first reply, held-out)")
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--updates", type=int, default=32)
    parser.add_argument("--eval-at", nargs="+", type=int, default=[0, 4, 8, 16, 32])
    parser.add_argument("--eval-n", type=int, default=32)
    parser.add_argument("--eval-seed", type=int, default=1234)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--lr", type=float, default=None, help="learning rate (default: the model's preset)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-personalization"))
    parser.add_argument("--rerun", action="store_true", help="ignore finished runs found in --out")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.model == "tiny":  # bootstrap once, before any timed run
        from claw_train.policy.loader import resolve_model

        args.model = resolve_model("tiny", family="conversation", progress=True)
    points = [u for u in sorted(set(args.eval_at) | {0}) if u <= args.updates]
    results: dict[str, list[dict]] = {}
    for method in args.methods:
        results[method] = [run_one(args, method, seed) for seed in args.seeds]
    table = aggregate(results, points)
    print(f"\npersonalization score (mean ± sd over seeds {args.seeds}; valid-reply rate), eval n={args.eval_n}")
    print(f"{'method':>9} " + " ".join(f"{f'@{u}':>22}" for u in points))
    for method, rows in table.items():
        cells = []
        for u in points:
            if u in rows:
                (m, s), (v, _) = rows[u]["score"], rows[u]["valid"]
                cells.append(f"{m:.3f} ± {s:.3f} ({v:4.0%})")
            else:
                cells.append("-")
        print(f"{method:>9} " + " ".join(f"{c:>22}" for c in cells))
    print()
    for name, ok, detail in check_targets(table):
        print(f"  [{'x' if ok else ' '}] {name}: {detail}")
    title = f"claw · student persona · tiny model · {len(args.seeds)} seeds · cpus={os.cpu_count()}"
    plot(table, points, args.out / "personalization.png", title)
    (args.out / "personalization.json").write_text(
        json.dumps({m: {str(u): v for u, v in rows.items()} for m, rows in table.items()}, indent=2)
    )
    print(f"\nwrote {args.out / 'personalization.png'} and {args.out / 'personalization.json'}")


if __name__ == "__main__":
    main()
