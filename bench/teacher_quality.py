"""How good is the OPD teacher? The bootstrapped model's first replies to held-out homework without a hint (the
policy as it starts) and with one (the teacher OPD distils from: the same model, the hint in context).

OPD moves the policy toward what the hinted model writes, so the hinted replies bound what it can teach: their
rubric score is the style to be learned, their correctness the arithmetic that style comes with. The hint is the one
the trainer would see after the persona's complaint about a generic assistant-style reply (``complaint_hint``).
Prints, per persona, the mean rubric score and the share of correct answers, both ways, on the same problems and
sampling seeds (temperature 1, as in training), and the plain replies' correctness split by style: those in the
persona's style (rubric 1.0) and the rest. Given a trained checkpoint (``--model runs/.../checkpoint-16``) the split
shows whether answers got worse within a style or because the policy moved to the style it does arithmetic worse in.

Writes ``bench/results/teacher-quality.json`` (``--results DIR``, ``--name NAME`` to write elsewhere, e.g.
``teacher-quality-checkpoint16``): ``settings`` (``model``, ``n``, ``max_new_tokens``) and per persona
``<persona>.plain`` and ``<persona>.hinted`` (``score``: mean rubric score, ``correct``: share correct) and
``<persona>.styled`` and ``<persona>.other`` (the plain replies in the persona's style and the rest: ``correct``,
null when there are none, and ``n``).

Run: ``.venv/bin/python bench/teacher_quality.py [--personas student teacher] [--n 96] [--model PATH]`` (a few
minutes per persona at the default 96 on 2 cores with the tiny model; ``--personas student --n 4`` for a smoke run).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics

import numpy as np
import record

from claw_envs.conversation import builtin_tasks, hinted_messages, load_persona, render_reply, rubric, student_work
from claw_envs.conversation.demos import complaint_hint, opening_message
from claw_envs.conversation.tasks import Problem


async def measure(policy, persona_name: str, n: int, max_new_tokens: int) -> dict[str, tuple[float, float]]:
    """Mean rubric score and share correct of ``n`` first replies, plain and hinted, per way; and the plain
    replies' share correct and count in the persona's style (``styled``) and out of it (``other``)."""
    from claw_train.policy.base import SamplingParams
    from claw_train.policy.render import render_prompt

    persona = load_persona(persona_name)
    tasks = builtin_tasks("test")
    rng = np.random.default_rng(0)
    results: dict[str, list[tuple[float, bool]]] = {"plain": [], "hinted": []}
    while len(results["plain"]) < n:
        problem = Problem.from_task(tasks.sample(rng))
        work = student_work(problem) if persona.kind == "grade" else None
        opening = [{"role": "user", "content": opening_message(persona, problem, rng)}]
        hint = complaint_hint(persona, render_reply(persona, problem, "assistant", rng, work), problem, rng)
        if hint is None:
            continue
        seed = len(results["plain"])
        for way, messages in (("plain", opening), ("hinted", hinted_messages(opening, hint))):
            ids = render_prompt(policy.tokenizer, messages)
            sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0, seed=seed)
            reply = (await policy.generate(ids, sampling)).text
            result = rubric(persona, reply, problem, work)
            results[way].append((result.score, bool(result.correct)))
    out = {
        way: (statistics.fmean(s for s, _ in rows), statistics.fmean(c for _, c in rows))
        for way, rows in results.items()
    }
    for part, in_style in (("styled", True), ("other", False)):
        rows = [c for s, c in results["plain"] if (s == 1.0) == in_style]
        out[part] = (statistics.fmean(rows) if rows else math.nan, len(rows))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--personas", nargs="+", default=["student", "teacher"])
    parser.add_argument("--n", type=int, default=96, help="held-out problems per persona")
    parser.add_argument("--model", default="tiny", help="tiny (the bootstrapped conversation model) or a model path")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    record.options(parser, "teacher-quality")
    args = parser.parse_args()
    values: dict[str, object] = {"settings": {"model": args.model, "n": args.n, "max_new_tokens": args.max_new_tokens}}
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from claw_train.policy.inprocess import InProcessPolicy
    from claw_train.policy.loader import resolve_model

    policy = InProcessPolicy(resolve_model(args.model, family="conversation", progress=True))
    try:
        header = f"{'persona':>8}  {'plain: score':>12}  {'correct':>7}  {'hinted: score':>13}  {'correct':>7}"
        print(f"{header}  {'plain correct: in style':>23}  {'other':>10}  (n={args.n}, {args.model})")
        for name in args.personas:
            got = asyncio.run(measure(policy, name, args.n, args.max_new_tokens))
            (ps, pc), (hs, hc), (sc, sn), (oc, on) = got["plain"], got["hinted"], got["styled"], got["other"]
            split = f"{sc:13.0%} of {sn:>3}  {oc:4.0%} of {on:>3}"
            print(f"{name:>8}  {ps:12.3f}  {pc:7.0%}  {hs:13.3f}  {hc:7.0%}  {split:>23}", flush=True)
            values[name] = {
                "plain": {"score": ps, "correct": pc},
                "hinted": {"score": hs, "correct": hc},
                "styled": {"correct": None if math.isnan(sc) else sc, "n": sn},
                "other": {"correct": None if math.isnan(oc) else oc, "n": on},
            }
    finally:
        policy.close()
    record.write(args.name, values, folder=args.results)


if __name__ == "__main__":
    main()
