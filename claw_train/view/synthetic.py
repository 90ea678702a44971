"""A synthetic run folder with as many turns as asked, in the layout claw-train writes (``run.json``, per-version
``logs/v*.jsonl`` of turns and updates, ``ledger.jsonl``, ``evals.jsonl``, ``summary.json``): what the viewer's
bench (``bench/view.py``) and its 200,000-turn test read. The records have the real fields and typical sizes; the
texts are made up, never trained on."""

from __future__ import annotations

import json
import random
from pathlib import Path

REPLIES = (
    "**Step 1:** add the apples. 3 + 4 = 7\n\n**Answer: 7**",
    "ok so you add them up, 3 + 4 is 7. the answer is 7",
    "## Solution\n1. Multiply 6 by 8.\n2. That gives 48.\n\nFinal answer: 48",
    "she has 12 - 5 = 7 left, so 7",
)
USER_REPLIES = (
    ("thanks, that is perfect!", 1, None),
    ("Don't use any bold text. It looks like a bot wrote it.", -1, "Don't use any bold text."),
    ("what's the actual answer?", -1, "State the final number."),
    ("ok", 0, None),
)
REASONS = ("no_signal", "judge_unavailable", "infra_sandbox_failure")
CREDIT_TOKENS = 48


def write_synthetic_run(
    root: str | Path, *, turns: int = 200_000, versions: int = 20, credit_every: int = 20, seed: int = 0
) -> Path:
    """Write the folder and return its path; every ``credit_every``-th accepted turn carries per-token credit."""
    rng = random.Random(seed)
    root = Path(root)
    (root / "logs").mkdir(parents=True, exist_ok=True)
    options = {"env": "claw/Conversation-v0", "method": "combined", "model": "tiny", "updates": versions}
    (root / "run.json").write_text(json.dumps(options, indent=2))
    per_version = max(1, turns // versions)
    sample_no, accepted_seen = 0, 0
    ledger, evals = [], []
    for version in range(versions):
        count = per_version if version < versions - 1 else turns - per_version * (versions - 1)
        samples: list[str] = []
        with (root / "logs" / f"v{version:05d}.jsonl").open("w", encoding="utf-8") as fh:
            for k in range(count):
                text, evaluative, directive = rng.choice(USER_REPLIES)
                score = rng.choice((1, 0, -1, -1))
                hint = directive if directive and score == -1 and rng.random() < 0.8 else None
                masked = (score == 0 and hint is None) or rng.random() < 0.05
                sample_id = None
                if not masked:
                    sample_no += 1
                    sample_id = f"a0-{sample_no:07d}"
                    samples.append(sample_id)
                reply = rng.choice(REPLIES)
                record = {
                    "kind": "turn",
                    "time": 1.7e9 + version * 60 + k * 0.01,
                    "episode": f"ep{version:03d}{k // 2:07d}",
                    "group": "",
                    "task": f"test-{rng.randrange(500):04d}",
                    "step": k % 2 + 1,
                    "version": version,
                    "status": "ok",
                    "finish_reason": "stop",
                    "action": reply,
                    "tokens": len(reply),
                    "next_state": {"text": text, "role": "user", "evaluative": evaluative, "directive": directive},
                    "decision": "masked" if masked else "accepted",
                    "reason": (REASONS[k % 3] if score != 0 or hint else "no_signal") if masked else None,
                    "sample_id": sample_id,
                    "judgement": {
                        "score": score,
                        "votes": [{"score": score, "text": f"the user reacted: {text[:40]} \\boxed{{{score}}}"}] * 3,
                        "hint": hint,
                        "available": True,
                    },
                    "hint_accepted": hint is not None,
                }
                if sample_id is not None:
                    accepted_seen += 1
                    if accepted_seen % credit_every == 0:
                        record["credit"] = _credit(rng, reply, score)
                fh.write(_line(record))
            fh.write(_line({"kind": "update", "update": version + 1, "staleness": rng.uniform(0, 1)}))
            fh.write(_line({"kind": "metrics", "update": version + 1, "metrics": {"loss": rng.uniform(-0.1, 0.1)}}))
        ledger.append({"kind": "update", "update": version + 1, "samples": samples[:16], "dropped": []})
        evals.append({"update": version, "version": version, "score": 0.3 + 0.02 * version, "score_sd": 0.1})
    (root / "ledger.jsonl").write_text("".join(_line(r) for r in ledger))
    (root / "evals.jsonl").write_text("".join(_line(r) for r in evals))
    summary = {"status": "done", "message": f"finished {versions} updates", "updates": versions, "turns": turns}
    (root / "summary.json").write_text(json.dumps(summary))
    return root


def _line(record: dict[str, object]) -> str:
    return json.dumps(record, ensure_ascii=False) + "\n"


def _credit(rng: random.Random, reply: str, score: int) -> dict[str, object]:
    pieces = [reply[i : i + 2] for i in range(0, min(len(reply), 2 * CREDIT_TOKENS), 2)]
    old = [round(rng.uniform(-4, 0), 3) for _ in pieces]
    teacher = [round(o + rng.uniform(-1.5, 1.5), 3) for o in old]
    advantage = [round(score + t - o, 3) for t, o in zip(teacher, old, strict=True)]
    return {
        "method": "combined",
        "pieces": pieces,
        "advantage": advantage,
        "teacher": teacher,
        "old": old,
        "score": score,
        "w_rl": 1.0,
        "w_opd": 1.0,
    }
