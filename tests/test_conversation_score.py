"""The personalization rubric, one preference at a time, with the tricky replies."""

from __future__ import annotations

import pytest

from claw_envs.conversation import Problem, StudentWork, answer_correct, is_valid_reply, load_persona, rubric
from claw_envs.conversation.score import CHECKS, MAX_REPLY_CHARS, context, final_number, reply_problem
from claw_envs.conversation.tasks import Step

PROBLEM = Problem(
    "p",
    "Maya has 12 apples. She gets 5 more and then eats 4. How many are left?",
    13,
    (
        Step("12 + 5", 17),
        Step("17 - 4", 13),
    ),
)
RIGHT = StudentWork(PROBLEM.steps, 13, correct=True)
WRONG = StudentWork((Step("12 + 5", 17), Step("17 - 4", 14)), 14, correct=False, bad_index=1)
STUDENT = load_persona("student")
TEACHER = load_persona("teacher")


def check(name: str, reply: str, work: StudentWork | None = None, **params) -> bool:
    return CHECKS[name](context(reply, PROBLEM, work), **params)


def test_student_persona_reply_meets_everything_and_assistant_reply_almost_nothing():
    good = rubric(STUDENT, "ok so 12 + 5 is 17, then 17 - 4 is 13, so it's 13.", PROBLEM)
    assert good.score == 1.0 and good.correct and good.valid
    bad = rubric(
        STUDENT, "## Solution\n\n**Step 1:** 12 + 5 = 17\n**Step 2:** 17 - 4 = 13\n\n**Final Answer:** 13", PROBLEM
    )
    assert bad.met == {
        "well_formed": True,
        "no_bold": False,
        "no_headers": False,
        "no_step_list": False,
        "short": False,
        "casual": False,
    }
    assert bad.score == pytest.approx(1 / 6) and bad.correct


@pytest.mark.parametrize(
    ("reply", "ok"),
    [
        ("so it's **13** lol", False),
        ("so it's __13__ lol", False),
        ("so it's <b>13</b>", False),
        ("so it's 13, just 2 * 3 stuff", True),
        ("so it's 13, see `a**b**c`", True),
        ("so it's 13:\n```python\nprint(2**3)  # **not bold**\n```", True),
    ],
)
def test_no_bold_ignores_code_and_single_stars(reply, ok):
    assert check("no_bold", reply) is ok


@pytest.mark.parametrize(
    ("reply", "ok"),
    [
        ("# Answer\nit's 13", False),
        ("### Solution\nit's 13", False),
        ("Answer\n======\nit's 13", False),
        ("it's #1 on my list, 13", True),
        ("so it's 13\n```\n# a comment\n```", True),
    ],
)
def test_no_headers(reply, ok):
    assert check("no_headers", reply) is ok


@pytest.mark.parametrize(
    ("reply", "ok"),
    [
        ("Step 1: add them. Step 2: take away 4.", False),
        ("step 1) 12 + 5", False),
        ("1. add\n2. subtract", False),
        ("- 12 + 5 = 17\n- 17 - 4 = 13", False),
        ("so 12 + 5 = 17 and 17 - 4 = 13, that's 13", True),
    ],
)
def test_no_step_list(reply, ok):
    assert check("no_step_list", reply) is ok


def test_short_counts_characters_and_lines():
    assert check("short", "so it's 13.")
    assert not check("short", "so it's 13. " * 30)
    assert not check("short", "so\nit's\n13")
    assert check("short", "so\nit's\n13", max_lines=3)


@pytest.mark.parametrize(
    ("reply", "ok"),
    [
        ("ok so it's 13", True),
        ("i think you just get 13", True),
        ("The result is 13.", False),
        ("ok so, the final answer is 13", False),
        ("Let's solve this: it's 13", False),
        ("Therefore it's 13", False),
    ],
)
def test_casual_needs_a_casual_marker_and_no_textbook_phrases(reply, ok):
    assert check("casual", reply) is ok


def test_verdict_must_match_the_students_work():
    assert check("verdict", "Your answer 13 is correct!", RIGHT)
    assert not check("verdict", "Your answer 13 is correct, but there is a mistake.", RIGHT)
    assert not check("verdict", "The answer is 13.", RIGHT)
    assert check("verdict", "Not quite, it should be 13.", WRONG)
    assert not check("verdict", "Your answer is correct!", WRONG)
    assert not check("verdict", "Your answer 13 is correct!")  # no student work to judge


def test_specific_needs_a_number_from_the_students_work_said_to_them():
    assert check("specific", "Your 17 - 4 = 14 has a slip.", WRONG)
    assert check("specific", "You wrote 14 at the end.", WRONG)
    assert not check("specific", "17 - 4 = 14 has a slip.", WRONG)  # not addressed to the student
    assert not check("specific", "You should check the last line.", WRONG)  # no number
    assert not check("specific", "You wrote 99.", WRONG)  # not a number the student wrote


def test_encouraging_and_harsh():
    assert check("encouraging", "Great job, keep it up!")
    assert check("encouraging", "So close, you've got this.")
    assert not check("encouraging", "The answer is 13.")
    assert not check("encouraging", "Nice try, but that was careless.")


def test_emoji():
    assert check("emoji", "well done 🎉")
    assert check("emoji", "star ⭐ student")
    assert not check("emoji", "well done :)")


def test_emoji_only_reply_meets_the_emoji_check_but_scores_zero():
    result = rubric(TEACHER, "🎉🎉🎉", PROBLEM, RIGHT)
    assert result.raw["emoji"] is True
    assert result.score == 0.0 and not result.valid and result.invalid_kind == "degenerate"


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        ("", "empty"),
        ("   \n ", "empty"),
        ("x" * (MAX_REPLY_CHARS + 1), "too_long"),
        ("\ufffd\ufffd\x00\x01 so 13 \ufffd\ufffd", "junk"),
        ('<tool_call>{"name": "python", "arguments": {"code": "print(13)"}}</tool_call>', "tool_call"),
        ('{"name": "calculator", "arguments": {"expr": "12+5-4"}}', "tool_call"),
        ('```json\n{"tool": "calc", "arguments": "12+5-4"}\n```', "tool_call"),
        ("答案是13，因为12加5等于17", "language"),
        ("La respuesta es 13 porque doce más cinco son diecisiete", "language"),
        ("asdkj qwe zzxq 13", "language"),
        ("the the the the the the the the the the 13", "degenerate"),
        ("so it's 13 " + "!" * 40, "degenerate"),
        ("?!?!", "degenerate"),
        ("13", "terse"),
    ],
)
def test_invalid_replies_are_named_and_score_zero(reply, kind):
    assert reply_problem(reply) == kind
    assert not is_valid_reply(reply)
    for persona in (STUDENT, TEACHER):
        result = rubric(persona, reply, PROBLEM)
        assert result.score == 0.0 and not result.valid and result.invalid_kind == kind


def test_degenerate_text_without_bold_does_not_score_well():
    result = rubric(STUDENT, "hmm ok idk lol", PROBLEM)
    assert result.valid and result.raw["no_bold"] and result.raw["short"]
    assert result.score == 0.0  # no final number: nothing counts


def test_huge_reply_is_not_read_and_scores_zero():
    result = rubric(STUDENT, "so it's 13. " * 100_000, PROBLEM)
    assert result.invalid_kind == "too_long" and result.raw == {} and result.score == 0.0


def test_tool_call_with_prose_around_it_is_a_valid_reply():
    assert is_valid_reply('ok so I checked it <tool_call>{"name": "calc"}</tool_call> and it is 13')


@pytest.mark.parametrize(
    ("reply", "number"),
    [
        ("so it's 13.", 13),
        ("12 + 5 = 17, then 17 - 4 = 13", 13),
        ("**Final Answer:** 13\n\nHope that helps, step 2 was tricky", 13),
        ("your answer is 14 but it should be 13, step 3 fixes it", 13),
        ("The answer is $1,200.", 1200),
        ("the answer is \\boxed{2.5}", 2.5),
        ("no numbers here", None),
        ("1. 12 + 5 = 17\n2. 17 - 4 = 13", 13),
    ],
)
def test_final_number(reply, number):
    assert final_number(reply) == number


@pytest.mark.parametrize(
    ("reply", "number"),
    [
        ("### Step-by-step solution\n1.", None),  # a list marker left dangling answers nothing
        ("Let's work it out:\n\nStep 2:", None),
        ("Maya has 12 apples and gets 5 more, then she eats 4", None),  # the question's numbers, restated
        ("she eats 4, so she has 13 left", 13),
        ("12 + 5 = 17 and 17 - 4 = 13\n1) done", 13),
        ("she ends up with 17 - 4 = 4", 4),  # a number of the question given as a result still answers
        ("so it's 4", 4),
    ],
)
def test_an_answer_is_stated_not_a_list_marker_or_a_number_from_the_question(reply, number):
    assert final_number(reply, PROBLEM.question) == number


def test_a_reply_that_states_no_answer_is_not_well_formed_and_accepted_needs_everything():
    gamed = rubric(STUDENT, "### Step-by-step solution\n1.", PROBLEM)
    assert not gamed.met["well_formed"] and gamed.score == 0.0 and not gamed.accepted
    wrong = rubric(STUDENT, "ok so it's 14.", PROBLEM)
    assert wrong.score == 1.0 and not wrong.accepted
    right = rubric(STUDENT, "ok so 12 + 5 is 17, then 17 - 4 is 13, so it's 13.", PROBLEM)
    assert right.accepted and right.to_dict()["accepted"]


def test_answer_correct_is_reported_beside_the_score():
    wrong = rubric(STUDENT, "ok so it's 14.", PROBLEM)
    assert wrong.score == 1.0 and not wrong.correct
    assert answer_correct("ok so it's 13.", 13) and not answer_correct("ok so it's 13.5", 13)
    assert not answer_correct("", 13)


def test_regex_preferences_from_a_persona_file(tmp_path):
    text = (STUDENT.source.read_text()).replace(
        "  - name: casual\n",
        "  - name: says_hi\n    check: matches\n    params: {pattern: '^hi\\b'}\n"
        '    complaints: ["ugh you didn\'t even say hi."]\n    corrections: ["Start with hi."]\n'
        "  - name: casual\n",
    )
    path = tmp_path / "polite.yaml"
    path.write_text(text)
    persona = load_persona(path)
    assert [p.name for p in persona.preferences][-2:] == ["says_hi", "casual"]
    assert rubric(persona, "hi, so it's 13", PROBLEM).score == 1.0
    assert rubric(persona, "so it's 13", PROBLEM).met["says_hi"] is False


def test_a_reply_cut_at_the_token_limit_is_not_valid_and_meets_nothing():
    reply = "ok so 12 + 5 is 17, then 17 - 4 is 13, so it's 13."
    assert rubric(STUDENT, reply, PROBLEM).score == 1.0
    cut = rubric(STUDENT, reply, PROBLEM, cut_off=True)
    assert cut.invalid_kind == "cut_off" and not cut.valid and cut.score == 0.0 and not cut.correct
    assert rubric(STUDENT, "x" * (MAX_REPLY_CHARS + 1), PROBLEM, cut_off=True).invalid_kind == "too_long"


def test_a_persona_file_without_a_cut_off_reaction_uses_its_too_long_one(tmp_path):
    import yaml

    data = yaml.safe_load(STUDENT.source.read_text())
    del data["reask"]["cut_off"]
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_persona(path).reask["cut_off"] == load_persona(path).reask["too_long"]
    assert STUDENT.reask["cut_off"] != STUDENT.reask["too_long"]
