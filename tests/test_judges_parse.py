"""Reading judge answers: the last \\boxed verdict, hints between tags, majority voting and hint choice."""

from __future__ import annotations

import pytest

from claw_envs import Evaluative, NextState
from judges import HintJudge, PRMJudge
from judges.backends import JudgeBackend, JudgeRequest
from judges.parse import extract_hint, majority, parse_score


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The step worked. \\boxed{1}", 1),
        ("\\boxed{-1}", -1),
        ("\\boxed{0}", 0),
        ("\\boxed{ +1 }", 1),
        ("\\boxed{-0}", 0),
        ("\\boxed{1.0}", 1),
        ("$\\boxed{\\text{-1}}$", -1),
        ("first \\boxed{1} then, on reflection, \\boxed{-1}", -1),
        ("final \\boxed{1} then an unclosed \\boxed{-1", 1),
        ("no verdict at all", None),
        ("", None),
        (None, None),
        ("\\boxed{2}", None),
        ("\\boxed{-2}", None),
        ("\\boxed{yes}", None),
        ("\\boxed{}", None),
        ("\\boxed{1", None),
        ("\\boxed{1} but the last box is junk \\boxed{maybe}", None),
        ("\\boxed{" + "1" * 500 + "}", None),
        ("boxed{1}", None),
    ],
)
def test_parse_score(text, expected):
    assert parse_score(text) == expected


def test_parse_score_and_hint_survive_huge_and_hostile_text():
    huge = "x" * 100_000 + "\\boxed{-1}"
    assert parse_score(huge) == -1
    assert parse_score("\\boxed{" * 20_000) is None
    assert parse_score("}" * 100_000) is None
    assert extract_hint("[HINT_START]" * 20_000) is None
    assert extract_hint("[HINT_END]" * 20_000) is None
    long_hint = "[HINT_START]" + "be brief. " * 10_000 + "[HINT_END]"
    assert len(extract_hint(long_hint)) > 90_000


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[HINT_START]Use plain text, no bold.[HINT_END] \\boxed{1}", "Use plain text, no bold."),
        ("[HINT_START]\n  Check the exit code\n  first. [HINT_END]", "Check the exit code first."),
        ("[HINT_START]too short[HINT_END]", None),  # 9 characters
        ("[HINT_START]exactly10![HINT_END]", None),  # 10 is not more than 10
        ("[HINT_START]eleven char[HINT_END]", "eleven char"),
        ("[HINT_START]never closed, so no hint here", None),
        ("closing only[HINT_END]", None),
        ("[HINT_START]first hint, quite long[HINT_END] [HINT_START]second hint wins[HINT_END]", "second hint wins"),
        ("[HINT_START]a complete hint text[HINT_END] then [HINT_START]cut off", "a complete hint text"),
        ("", None),
        (None, None),
    ],
)
def test_extract_hint(text, expected):
    assert extract_hint(text) == expected


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([1, 1, -1], 1),
        ([-1, -1, 1], -1),
        ([0, 0, 1], 0),
        ([1, -1], 0),  # tie
        ([1, -1, 0], 0),  # three-way tie
        ([1, 1, -1, -1, 0], 0),  # tie for first place
        ([None, None, -1], -1),  # invalid votes are ignored
        ([None, 1, -1], 0),  # tie among the valid ones
        ([None, None, None], 0),  # no valid vote
        ([], 0),
        ([1], 1),
    ],
)
def test_majority(scores, expected):
    assert majority(scores) == expected


class ScriptedBackend(JudgeBackend):
    """Answers vote i with ``answers[i]`` (a local stand-in; the HTTP path is tested in test_judges_backends)."""

    name = "scripted"

    def __init__(self, answers):
        super().__init__()
        self.answers = answers

    async def complete(self, request: JudgeRequest) -> str:
        return self.answers[request.vote_index]


STEP = NextState("Wrong: you sent 'x'.", evaluative=Evaluative(-1.0), judge_inputs={"task": "say hi", "result": "no"})


async def test_prm_majority_with_invalid_votes_and_counts():
    backend = ScriptedBackend(["ok \\boxed{1}", "\\boxed{2}", "no box", "\\boxed{1}", "\\boxed{-1}"])
    judgement = await PRMJudge(backend, "prm_generic", votes=5).score("x", STEP)
    assert judgement.score == 1.0
    assert [v.score for v in judgement.votes] == [1, None, None, 1, -1]
    assert judgement.votes[2].text == "no box" and judgement.votes[2].error is None
    assert judgement.available
    counts = backend.metrics.as_dict()
    assert (counts["votes"], counts["votes_valid"], counts["votes_invalid"], counts["votes_failed"]) == (5, 3, 2, 0)


async def test_prm_all_invalid_is_zero_but_available():
    judgement = await PRMJudge(ScriptedBackend(["", "\\boxed{2}", "x" * 100_000]), "prm_generic").score("x", STEP)
    assert judgement.score == 0.0 and judgement.available
    assert all(v.score is None for v in judgement.votes)
    assert len(judgement.votes[2].text) < 20_000 and "not kept" in judgement.votes[2].text


async def test_prm_tie_is_zero():
    judgement = await PRMJudge(ScriptedBackend(["\\boxed{1}", "\\boxed{-1}"]), "prm_generic", votes=2).score("x", STEP)
    assert judgement.score == 0.0


async def test_hint_judge_picks_longest_accepted_hint():
    answers = [
        "[HINT_START]Reply with the phrase only.[HINT_END] \\boxed{1}",
        "[HINT_START]Reply with exactly the phrase, nothing before or after it.[HINT_END] \\boxed{-1}",  # says -1
        "[HINT_START]Reply with exactly the phrase and nothing else.[HINT_END] \\boxed{1}",
        "[HINT_START]short[HINT_END] \\boxed{1}",  # too short
        "[HINT_START]never closed, and longer than every other hint in this list \\boxed{1}",
    ]
    backend = ScriptedBackend(answers)
    result = await HintJudge(backend, "hint_agent", votes=5).hint("x", STEP)
    assert result.hint == "Reply with exactly the phrase and nothing else."
    assert [v.hint is not None for v in result.votes] == [True, False, True, False, False]
    counts = backend.metrics.as_dict()
    assert (counts["hint_votes_accepted"], counts["hint_votes_rejected"], counts["hints_accepted"]) == (2, 3, 1)


async def test_hint_judge_rejects_overlong_hint_and_gives_none():
    answers = ["[HINT_START]" + "word " * 1000 + "[HINT_END] \\boxed{1}", "nothing to learn \\boxed{-1}", ""]
    backend = ScriptedBackend(answers)
    result = await HintJudge(backend, "hint_agent").hint("x", STEP)
    assert result.hint is None and result.available
    assert backend.metrics["hints_none"] == 1 and backend.metrics["hints_accepted"] == 0


def test_judges_refuse_zero_votes_and_missing_template():
    with pytest.raises(ValueError, match="at least one vote"):
        PRMJudge(ScriptedBackend([]), "prm_generic", votes=0)
    with pytest.raises(ValueError, match="prompt template"):
        HintJudge(ScriptedBackend([]), None)
