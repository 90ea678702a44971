"""The rules judge (no model): scores from env-native signals and reply patterns, hints from directives,
checked on EchoEnv's scripted good and bad episodes and on the `claw-envs judge` command."""

from __future__ import annotations

import gymnasium as gym
import pytest
from typer.testing import CliRunner

import claw_envs
from claw_envs import Evaluative, NextState
from judges import make_judge
from judges.backends.rules import directive_to_hint, rule_score


async def run_episode(actions_for, votes: int = 3):
    """Play an EchoEnv episode, judging every step with the rules backend; returns [(score, hint, env signal)]."""
    env = gym.make("claw/Echo-v0").unwrapped
    judge = make_judge("rules", family="echo", votes=votes)
    out = []
    try:
        await env.areset(seed=4)
        for step in range(env.max_turns):
            action = actions_for(env, step)
            _, _, terminated, truncated, info = await env.astep(action)
            ns = info["next_state"]
            judgement = await judge.judge(action, ns, info["messages"])
            assert judgement.available and len(judgement.votes) == votes == len(judgement.hint_votes)
            assert len({v.text for v in judgement.votes}) == 1  # deterministic: the votes agree
            out.append((judgement.score, judgement.hint, ns.evaluative.score))
            if terminated or truncated:
                break
    finally:
        await env.aclose()
    return out, judge.metrics_dict()


async def test_good_episode_scores_plus_one_without_hint():
    steps, counts = await run_episode(lambda env, k: env.reference_action())
    assert steps == [(1.0, None, 1.0)]
    assert counts["hints_none"] == 1 and counts["votes_valid"] == 6


async def test_bad_episode_scores_minus_one_with_a_hint_every_step():
    steps, counts = await run_episode(lambda env, k: f"junk {k}")
    assert [s for s, _, _ in steps] == [-1.0, -1.0, -1.0]
    phrase = claw_envs.env_class("claw/Echo-v0").default_tasks("train").get("echo-train-4").data["phrase"]
    for _, hint, _ in steps:
        assert hint == f"Next time, reply with exactly {phrase!r} and nothing else."
    assert counts["hints_accepted"] == 3 and counts["votes_invalid"] == 0


async def test_mixed_episode_flips_from_minus_to_plus():
    steps, _ = await run_episode(lambda env, k: "nope" if k == 0 else env.reference_action(), votes=1)
    assert [(s, h is not None) for s, h, _ in steps] == [(-1.0, True), (1.0, False)]


@pytest.mark.parametrize("env_id", claw_envs.env_ids())
async def test_every_family_junk_is_minus_with_hint_and_reference_is_plus(env_id):
    env = gym.make(env_id).unwrapped
    judge = make_judge("rules", family=claw_envs.family_spec(env_id).name, votes=3)
    judged = []
    try:
        await env.areset(seed=0)
        action = "???"
        while action is not None:
            _, _, terminated, truncated, info = await env.astep(action)
            judged.append(await judge.judge(action, info["next_state"], info["messages"]))
            if terminated or truncated:
                break
            action = env.reference_action()
    finally:
        await env.aclose()
    junk, *reference = judged
    assert junk.score == -1.0 and junk.hint is not None, junk
    assert reference, "the env offered no reference action"
    assert all(j.score >= 0 for j in reference), [j.score for j in reference]
    assert reference[-1].score == 1.0
    assert all(j.available for j in judged)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Thanks, that's exactly what I needed!", 1),
        ("perfect, that works", 1),
        ("I asked for the total, not the average.", -1),
        ("That's not what I wanted. Try again.", -1),
        ("please don't use bold, real students don't write like that", -1),
        ("No, the answer is 12.", -1),
        ("Thanks, but you didn't answer the second part.", -1),  # a complaint outweighs politeness
        ("Traceback (most recent call last):\n  File ...\nZeroDivisionError: division by zero", -1),
        ("bash: foo: command not found", -1),
        ("3 passed, 0 failed", 0),  # a zero count is not a failure
        ("Don't worry about it. Next question: what is 3 + 4?", 0),
        ("ok", 0),
        ("Next question: what is 3 + 4?", 0),
        ("", 0),
        ("\ufffd\ufffd junk \x00", 0),
        ("x" * 100_000, 0),
    ],
)
def test_reply_patterns_when_the_env_gives_no_score(text, expected):
    score, reason = rule_score(NextState(text, role="user"))
    assert score == expected, reason


def test_env_score_wins_over_text_and_a_bare_directive_counts_against():
    assert rule_score(NextState("thanks!", evaluative=Evaluative(-0.5, ("tests=1/4",))))[0] == -1
    assert rule_score(NextState("Error: nothing", evaluative=Evaluative(0.25)))[0] == 1
    assert rule_score(NextState("Nothing ran.", directive="Call the tool in a <tool_call> block."))[0] == -1
    assert rule_score(NextState("Great, thanks.", directive="Also cite the source."))[0] == 1
    assert rule_score(NextState("Nothing ran.", directive="  "))[0] == 0


@pytest.mark.parametrize(
    ("directive", "hint"),
    [
        (None, None),
        ("   ", None),
        ("Reply with exactly 'a b c' and nothing else.", "Next time, reply with exactly 'a b c' and nothing else."),
        ("Don't use bold", "Next time, don't use bold."),
        (
            "The test test_add failed: expected 3, got -1.",
            "Keep this in mind next time: The test test_add failed: expected 3, got -1.",
        ),
        ("use   plain\ntext!", "Next time, use plain text!"),
    ],
)
def test_directive_becomes_an_instruction(directive, hint):
    assert directive_to_hint(directive) == hint


async def test_huge_directive_is_capped_and_still_accepted():
    ns = NextState("bad", evaluative=Evaluative(-1.0), directive="Use plain text. " * 10_000)
    judgement = await make_judge("rules", family="conversation", votes=1).judge("**x**", ns)
    assert judgement.score == -1.0 and judgement.hint is not None and len(judgement.hint) < 700


def test_claw_envs_judge_prints_votes_score_and_hint():
    from claw_train.commands.envs import app

    result = CliRunner().invoke(app, ["judge", "--env", "echo", "--backend", "rules", "--votes", "2", "--seed", "1"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "score -1" in out and "score +1" in out
    assert "Next time, reply with exactly" in out and "accepted" in out and "rejected" in out
    assert out.index("score -1") < out.index("score +1")


def test_claw_envs_judge_rejects_bad_arguments():
    from claw_train.commands.envs import app

    result = CliRunner().invoke(app, ["judge", "--env", "echo", "--backend", "gpt-judge"])
    assert result.exit_code != 0 and "unknown judge" in result.output
    result = CliRunner().invoke(app, ["judge", "--env", "nope"])
    assert result.exit_code != 0 and "unknown env" in result.output
