"""Did a served policy learn its users' hints? ``claw-eval --sessions RUN_DIR`` for a claw-serve run folder, where
no rubric exists: the hints users gave become the check.

From the run's logs: the opening request of every conversation (each session's transcripts, as the policy saw it,
token-exact) whose user gave at least one accepted hint in that session. Held out: the openings whose turn was never
trained on (not in the ledger); when every one was, all are used and the report says so. Each version — the run's
starting model and its latest checkpoint — answers each opening afresh (greedy), and the run's judge (``--judge``
of the run, ``rules`` by default, with its votes) decides for each reply and each of that user's hints whether the
reply breaks it (a model judge with the family's ``JudgeTemplates.hint_check`` prompt; the rules judge takes the
family's own reading, ``FamilySpec.live``'s ``hint_check``). The figure: the share of (reply, hint) checks judged
broken (-1); checks judged 0 (the hint does not apply, or the judge cannot tell) are counted apart.

The result is printed and written to ``RUN_DIR/sessions_check.json``, which claw-view's "did it improve?" shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claw_envs import FamilySpec
from claw_envs.spec import resolve
from claw_train.policy.base import SamplingParams
from claw_train.runlog.logs import Ledger, json_line, read_logs

REPORT = "sessions_check.json"


class SessionsError(ValueError):
    """A run folder this check cannot use (said in one line)."""


@dataclass
class Opening:
    """One conversation's first request as the policy saw it, and the hints its user gave in that session."""

    session: str
    prompt: str
    request: str
    hints: list[str]
    trained: bool


def openings(run_dir: Path) -> list[Opening]:
    """The openings of the run's conversations whose user gave a hint (see the module docstring)."""
    turns = [r for r in read_logs(run_dir / "logs") if r.get("kind") == "turn"]
    if not turns:
        raise SessionsError(f"{run_dir}: no turns in logs/ (is it a claw-serve run folder?)")
    trained = {s for u in Ledger(run_dir / "ledger.jsonl").effective() for s in u.get("samples", [])}
    hints: dict[str, list[str]] = {}
    for t in turns:
        hint = (t.get("judgement") or {}).get("hint")
        if t.get("hint_accepted") and hint and hint not in hints.setdefault(str(t.get("task")), []):
            hints[str(t["task"])].append(hint)
    out = []
    for t in turns:
        prompt = t.get("prompt")
        if t.get("step") != 1 or not hints.get(str(t.get("task"))):
            continue
        if not isinstance(prompt, dict) or not isinstance(prompt.get("text"), str):
            raise SessionsError(f"{run_dir}: its turns do not log their prompts (a run from before claw-view)")
        session = str(t["task"])
        out.append(
            Opening(session, prompt["text"], _last_user(prompt["text"]), hints[session], t.get("sample_id") in trained)
        )
    return out


def _last_user(rendered: str) -> str:
    """The last user message of a rendered chat (ChatML-style markers), else the whole text."""
    start = rendered.rfind("user\n")
    return rendered[start + 5 :].split("<|im_end|>")[0].strip() if start >= 0 else rendered


async def check_sessions(run_dir: Path, spec: FamilySpec, *, max_new_tokens: int, seed: int = 0) -> dict[str, Any]:
    """Run the check on ``run_dir``; returns the report (also written to ``RUN_DIR/sessions_check.json``)."""
    from claw_train.options.yaml_text import option_values
    from claw_train.policy.loader import load_policy, resolve_model
    from claw_train.runlog.checkpoints import last_checkpoint, read_json
    from judges import PRMJudge, make_backend

    options = read_json(run_dir / "run.json") or {}
    if spec.live is None:
        raise SessionsError(f"the {spec.name!r} family has no live-session adapter (FamilySpec.live) to read hints")
    live = resolve(spec.live)()
    every = openings(run_dir)
    held_out = [o for o in every if not o.trained]
    chosen = held_out or every
    if not chosen:
        raise SessionsError(f"{run_dir}: no conversation whose user gave an accepted hint")
    latest = last_checkpoint(run_dir / "checkpoints")
    start = str(options.get("model") or "tiny")
    versions = [("version 0 (the starting model)", resolve_model(start, family=spec.name, progress=False))]
    if latest is not None:
        versions.append((f"latest ({latest.name})", str(latest)))
    judge_spec = str(options.get("judge") or "rules")
    judge_options = option_values(options.get("judge_options") or {})
    backend = make_backend(judge_spec, **judge_options) if judge_spec != "policy" else None
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, seed=seed)
    rows, examples = [], []
    for label, model in versions:
        policy = load_policy(model, "inprocess", family=spec.name, progress=False)
        judge_backend = backend or make_backend("policy", policy=policy, **judge_options)
        judge = PRMJudge(judge_backend, spec.judge.hint_check, votes=int(options.get("votes") or 3))
        counts = {"replies": 0, "checks": 0, "broken": 0, "not_applicable": 0}
        try:
            for o in chosen:
                ids = policy.tokenizer.encode(o.prompt, add_special_tokens=False)
                reply = (await policy.generate(ids, sampling)).text
                counts["replies"] += 1
                for hint in o.hints:
                    verdict = await judge.score(reply, live.hint_check(hint, reply, o.request))
                    counts["checks"] += 1
                    counts["broken"] += verdict.score < 0
                    counts["not_applicable"] += verdict.score == 0
                    if len(examples) < 40:
                        examples.append({"version": label, "request": o.request, "hint": hint, "reply": reply,
                                         "score": verdict.score})  # fmt: skip
        finally:
            await policy.aclose()
        rows.append(
            {"label": label, "model": model, **counts, "broken_rate": counts["broken"] / max(1, counts["checks"])}
        )
    report = {
        "judge": judge_spec,
        "prompts": len(chosen),
        "held_out": bool(held_out),
        "sessions": len({o.session for o in chosen}),
        "versions": rows,
        "examples": examples,
    }
    (run_dir / REPORT).write_text(json_line(report))
    return report


def report_lines(report: dict[str, Any]) -> list[str]:
    """The report as the lines ``claw-eval --sessions`` prints."""
    which = "held-out" if report["held_out"] else "all (every one was trained on)"
    lines = [
        f"{report['prompts']} opening requests ({which}) of {report['sessions']} sessions, judged by "
        f"{report['judge']}: share of (reply, earlier hint of the same user) checks the reply breaks"
    ]
    for row in report["versions"]:
        lines.append(
            f"  {row['label']:<36} {row['broken_rate']:6.1%} broken  ({row['broken']}/{row['checks']} checks, "
            f"{row['not_applicable']} not applicable, {row['replies']} replies)"
        )
    return lines
