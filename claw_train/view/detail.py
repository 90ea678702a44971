"""What the page shows of one turn (its record, its episode, the prompt the policy saw) and of a whole run's
before/after check, assembled from a :class:`~claw_train.view.runs.RunIndex`."""

from __future__ import annotations

import json
from typing import Any

from claw_train.view.runs import RunIndex

SESSIONS_CHECK = "sessions_check.json"
"""Where ``claw-eval --sessions RUN_DIR`` leaves its figures in the run folder (the page shows them)."""


def turn_detail(index: RunIndex, i: int) -> dict[str, Any]:
    """Turn ``i`` in full: its record, the turns of its episode, and its prompt as the policy saw it."""
    record = index.record(i)
    if record is None:
        return {"n": i, "missing": "its line is no longer in the log file (was the run folder replaced?)"}
    t = index.turns
    episode = index.episode(i)
    before = [j for j in episode if t.step.values[j] <= t.step.values[i]]
    records = {j: (record if j == i else index.record(j)) for j in before}
    return {
        "n": i,
        "record": record,
        "episode": [
            {
                "n": j,
                "step": t.step.values[j],
                "version": t.version.values[j],
                "decision": t.reasons.names[t.reason.values[j]],
            }
            for j in episode
        ],
        "prompt": prompt_text([records[j] for j in before if records[j] is not None]),
    }


def prompt_text(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last record's prompt, put together from the episode's turns: each turn logs only the prompt tokens that
    are new since the turn before (``prompt.start``: where they begin; ``prompt.tokens``: the whole prompt's length),
    so a turn's prompt is its own piece after those of the turns before it. Tokens no logged piece covers are shown
    as a gap. ``None`` when the run logged no prompts (older runs)."""
    if not records or not isinstance(records[-1].get("prompt"), dict):
        return None
    parts: list[dict[str, Any]] = []
    covered = 0
    for record in records:
        piece = record.get("prompt")
        if not isinstance(piece, dict):
            continue
        start = int(piece.get("start", 0))
        if start > covered:
            parts.append({"gap": start - covered})
        parts.append({"text": str(piece.get("text", "")), "step": record.get("step")})
        covered = int(piece.get("tokens", start))
    return {"parts": parts, "tokens": covered}


def improvement(index: RunIndex) -> dict[str, Any]:
    """The before/after check: held-out replies of the first and the latest evaluated version side by side with
    their scores (logged by evaluations, ``kind: "eval_episode"``), and ``claw-eval --sessions``'s figures for a
    served run when the folder holds them."""
    with index.lock:
        episodes = list(index.eval_episodes)
        evals = list(index.evals)
    out: dict[str, Any] = {"sessions": _sessions_check(index)}
    updates = sorted({int(e.get("update", 0)) for e in episodes})
    if not updates:
        out["message"] = (
            "no held-out replies in this run's logs (claw-train logs them at each --eval-every evaluation)"
            if not out["sessions"]
            else None
        )
        return out
    first, last = updates[0], updates[-1]
    before = {_key(e): e for e in episodes if e.get("update") == first}
    after = {_key(e): e for e in episodes if e.get("update") == last}
    pairs = [
        {"task": key[0], "prompt": _prompt(before[key]), "before": _reply(before[key]), "after": _reply(after.get(key))}
        for key in before
    ]
    scores = {int(e["update"]): e.get("score") for e in evals if "update" in e}
    out |= {
        "first": first,
        "last": last,
        "score_first": scores.get(first),
        "score_last": scores.get(last),
        "score_name": next((e.get("score_name") for e in evals if e.get("score_name")), None),
        "pairs": pairs,
    }
    return out


def _key(episode: dict[str, Any]) -> tuple[str, int]:
    return str(episode.get("task_id")), int(episode.get("sample", 0))


def _prompt(episode: dict[str, Any]) -> str:
    if episode.get("prompt"):
        return str(episode["prompt"])
    messages = episode.get("messages") or []
    return next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")


def _reply(episode: dict[str, Any] | None) -> dict[str, Any] | None:
    if episode is None:
        return None
    messages = episode.get("messages") or []
    reply = episode.get("reply") or next((m.get("content") for m in messages if m.get("role") == "assistant"), "")
    return {"reply": reply, "outcome": episode.get("outcome"), "met": episode.get("met"), "messages": messages}


def _sessions_check(index: RunIndex) -> dict[str, Any] | None:
    try:
        data = json.loads((index.root / SESSIONS_CHECK).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
