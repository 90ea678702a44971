"""A synthetic run folder with as many turns as asked, in the layout claw-train writes (``run.json``, per-version
``logs/v*.jsonl`` of turns and updates, ``ledger.jsonl``, ``evals.jsonl``, ``summary.json``): what the viewer's
bench (``bench/view.py``) and its 200,000-turn test read. The records have the real fields and typical sizes; the
texts are made up, never trained on."""

from __future__ import annotations

import json
import random
import re
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
    templates: dict[tuple[object, ...], list[str]] = {}
    for version in range(versions):
        count = per_version if version < versions - 1 else turns - per_version * (versions - 1)
        samples: list[str] = []
        with (root / "logs" / f"v{version:05d}.jsonl").open("w", encoding="utf-8") as fh:
            for k in range(count):
                user = rng.randrange(len(USER_REPLIES))
                score = rng.choice((1, 0, -1, -1))
                hinted = USER_REPLIES[user][2] is not None and score == -1 and rng.random() < 0.8
                masked = (score == 0 and not hinted) or rng.random() < 0.05
                reason = (REASONS[k % 3] if score != 0 or hinted else "no_signal") if masked else None
                reply = rng.randrange(len(REPLIES))
                sample_id = None
                if not masked:
                    sample_no += 1
                    sample_id = f"a0-{sample_no:07d}"
                    samples.append(sample_id)
                    accepted_seen += 1
                key = (reply, user, score, hinted, reason)
                if key not in templates:
                    templates[key] = _template(_turn(REPLIES[reply], USER_REPLIES[user], score, hinted, reason))
                values = {
                    "E": f'"ep{version:03d}{k // 2:07d}"',
                    "T": f'"test-{rng.randrange(500):04d}"',
                    "S": str(k % 2 + 1),
                    "V": str(version),
                    "I": f'"{sample_id}"' if sample_id else "null",
                    "M": f"{1.7e9 + version * 60 + k * 0.01:.2f}",
                }
                parts = templates[key]
                line = "".join(part if i % 2 == 0 else values[part] for i, part in enumerate(parts))
                if sample_id is not None and accepted_seen % credit_every == 0:
                    record = json.loads(line)
                    record["credit"] = _credit(rng, REPLIES[reply], score)
                    line = _line(record)
                fh.write(line)
            fh.write(_line({"kind": "update", "update": version + 1, "staleness": rng.uniform(0, 1)}))
            fh.write(_line({"kind": "metrics", "update": version + 1, "metrics": {"loss": rng.uniform(-0.1, 0.1)}}))
        ledger.append({"kind": "update", "update": version + 1, "samples": samples[:16], "dropped": []})
        evals.append({"update": version, "version": version, "score": 0.3 + 0.02 * version, "score_sd": 0.1})
    (root / "ledger.jsonl").write_text("".join(_line(r) for r in ledger))
    (root / "evals.jsonl").write_text("".join(_line(r) for r in evals))
    summary = {"status": "done", "message": f"finished {versions} updates", "updates": versions, "turns": turns}
    (root / "summary.json").write_text(json.dumps(summary))
    return root


def _turn(reply: str, user: tuple[str, int, str | None], score: int, hinted: bool, reason: str | None) -> dict:
    """A turn record whose varying fields are placeholders (``"@@E@@"``: see :func:`_template`)."""
    text, evaluative, directive = user
    return {
        "kind": "turn",
        "time": "@@M@@",
        "episode": "@@E@@",
        "group": "",
        "task": "@@T@@",
        "step": "@@S@@",
        "version": "@@V@@",
        "status": "ok",
        "finish_reason": "stop",
        "action": reply,
        "tokens": len(reply),
        "next_state": {"text": text, "role": "user", "evaluative": evaluative, "directive": directive},
        "decision": "masked" if reason else "accepted",
        "reason": reason,
        "sample_id": "@@I@@",
        "judgement": {
            "score": score,
            "votes": [{"score": score, "text": f"the user reacted: {text[:40]} \\boxed{{{score}}}"}] * 3,
            "hint": directive if hinted else None,
            "available": True,
        },
        "hint_accepted": hinted,
    }


def _template(record: dict[str, object]) -> list[str]:
    """The record's JSON line cut at its placeholders: literal text, a placeholder's letter, literal text, …"""
    return re.split(r'"@@(\w)@@"', _line(record))


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
