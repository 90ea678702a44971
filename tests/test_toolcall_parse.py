"""Tool-call parsing (Hermes and OpenAI formats, every malformed form), boxed answers and grading."""

from __future__ import annotations

import json

import pytest

from claw_envs.sandbox.output import cap_text
from claw_envs.tool_calls.parse import (
    TURN_ERRORS,
    ParseLimits,
    ToolCall,
    ToolCallError,
    json_depth,
    load_json,
    parse_action,
)
from claw_envs.tool_calls.schema import invalid_char, validate_arguments
from claw_envs.toolcall.boxed import last_boxed
from claw_envs.toolcall.signals import MathVerifier, exact_value, grade_answer, grade_response, normalize_answer
from claw_envs.toolcall.tools import PYTHON, last_error_line

SCHEMAS = {"python": PYTHON.parameters}


def call(payload: object) -> str:
    return f"<tool_call>{json.dumps(payload)}</tool_call>"


# -- parsing ---------------------------------------------------------------------------------


def test_several_hermes_calls_with_prose_keep_order_ids_and_spans():
    text = (
        "First the product.\n"
        + call({"name": "python", "arguments": {"code": "print(6*7)"}})
        + "\nthen the sum "
        + call({"name": "python", "arguments": '{"code": "print(1+2)"}'})
    )
    parsed = parse_action(text, SCHEMAS, id_prefix="call_3_")
    assert parsed.format == "hermes" and not parsed.errors
    assert [c.id for c in parsed.calls] == ["call_3_0", "call_3_1"]
    assert [c.arguments["code"] for c in parsed.calls] == ["print(6*7)", "print(1+2)"]
    assert parsed.text == "First the product.\n\nthen the sum"
    start, end = parsed.calls[0].span
    assert text[start:end].startswith("<tool_call>") and text[start:end].endswith("</tool_call>")
    assert parsed.calls[0].to_openai()["function"] == {"name": "python", "arguments": '{"code": "print(6*7)"}'}


def test_openai_message_and_bare_list_formats():
    msg = {
        "role": "assistant",
        "content": "let me compute",
        "tool_calls": [
            {"id": "abc", "type": "function", "function": {"name": "python", "arguments": '{"code": "print(1)"}'}}
        ],
    }
    parsed = parse_action(json.dumps(msg), SCHEMAS)
    assert parsed.format == "openai" and parsed.text == "let me compute"
    assert parsed.calls == [ToolCall("abc", "python", {"code": "print(1)"}, raw=parsed.calls[0].raw)]
    bare = parse_action(json.dumps(msg["tool_calls"]), SCHEMAS)
    assert bare.calls[0].arguments == {"code": "print(1)"}
    # plain JSON that is not a tool-call message is just text
    assert parse_action('{"answer": 3}', SCHEMAS).format == "none"


@pytest.mark.parametrize(
    ("text", "kind", "answerable", "needle"),
    [
        ('<tool_call>{"name": "python", "arguments": {"code": "print(1)"</tool_call>', "bad_json", False, "JSON"),
        ("<tool_call>{'name': 'python'}</tool_call>", "bad_json", False, "double quotes"),
        ('<tool_call>{"name": "python", "arguments": {"code": "x"}}', "unclosed_tag", False, "</tool_call>"),
        ('oops {"name": "python"}</tool_call>', "unopened_tag", False, "without a matching"),
        ('<tool_call>["python"]</tool_call>', "bad_call", False, '"name"'),
        ('<tool_call>{"arguments": {"code": "1"}}</tool_call>', "bad_call", False, '"name"'),
        ('<tool_call>{"name": "bash", "arguments": {"cmd": "ls"}}</tool_call>', "unknown_tool", True, "python"),
        ('<tool_call>{"name": "python", "arguments": {"code": 5}}</tool_call>', "wrong_type", True, "string"),
        ('<tool_call>{"name": "python", "arguments": {"code": null}}</tool_call>', "wrong_type", True, "null"),
        ('<tool_call>{"name": "python", "arguments": {}}</tool_call>', "bad_arguments", True, "missing"),
        (
            '<tool_call>{"name": "python", "arguments": {"code": "1", "t": 3}}</tool_call>',
            "bad_arguments",
            True,
            "unexpected argument 't'",
        ),
        ('<tool_call>{"name": "python", "arguments": "not json"}</tool_call>', "bad_json", True, "string"),
        ('<tool_call>{"name": "python", "arguments": [1]}</tool_call>', "wrong_type", True, "JSON object"),
        (
            '{"tool_calls": [{"id": "q", "function": {"name": "python", "arguments": "{code: 1}"}}]}',
            "bad_json",
            True,
            "not valid JSON",
        ),
        ('{"tool_calls": [{"id": "q", "function": {"arguments": "{}"}}]}', "bad_call", False, "function"),
        ('{"tool_calls": "python"}', "bad_call", False, "list"),
    ],
)
def test_every_malformed_call_is_a_structured_error(text, kind, answerable, needle):
    parsed = parse_action(text, SCHEMAS)
    assert parsed.has_tool_calls and not parsed.calls
    (err,) = parsed.errors
    assert isinstance(err, ToolCallError)
    assert err.kind == kind
    assert err.answerable is answerable
    assert needle in err.message


def test_one_bad_block_does_not_hide_the_good_ones():
    text = "<tool_call>{bad}</tool_call>" + call({"name": "python", "arguments": {"code": "print(2)"}})
    parsed = parse_action(text, SCHEMAS)
    assert [type(i).__name__ for i in parsed.items] == ["ToolCallError", "ToolCall"]
    text = '<tool_call>{"name": "python"' + call({"name": "python", "arguments": {"code": "print(2)"}})
    parsed = parse_action(text, SCHEMAS)
    assert [i.kind for i in parsed.errors] == ["unclosed_tag"] and len(parsed.calls) == 1


def test_validate_arguments_types():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "x": {"type": ["number", "null"]}}}
    assert validate_arguments(schema, {"n": 3, "x": None}) == []
    assert validate_arguments(schema, {"n": True}) == ["argument 'n' must be integer, got boolean"]
    assert validate_arguments(schema, {"n": 1.5}) == ["argument 'n' must be integer, got number"]
    assert validate_arguments(schema, "x") == ["arguments must be a JSON object, got string"]


def test_no_tool_call_in_plain_text():
    parsed = parse_action("I think it is \\boxed{12}.", SCHEMAS)
    assert not parsed.has_tool_calls and parsed.text == "I think it is \\boxed{12}."


# -- boxed answers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("so \\boxed{33}.", "33"),
        ("\\boxed{ 33 }", "33"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\left\\{1,2\\right\\}}", "\\left\\{1,2\\right\\}"),
        ("first \\boxed{3} then \\boxed{4}", "4"),
        ("\\boxed{\\text{outer \\boxed{1}}}", "\\text{outer \\boxed{1}}"),
        ("\\boxed{5} and an unfinished \\boxed{6", "5"),
        ("\\fbox{7}", "7"),
        ("\\boxed {8}", "8"),
        ("no box here", None),
        ("\\boxed{", None),
        ("\\boxed{ \\boxed{9}", "9"),  # an unclosed box is skipped, a closed one inside it still counts
        ("\\boxed{1\\}2}", "1\\}2"),
        ("\\\\boxed{4}", "4"),
        ("\\boxed{" * 3 + "5}}", "\\boxed{5}"),
    ],
)
def test_last_boxed(text, want):
    assert last_boxed(text) == want


# -- bounds ----------------------------------------------------------------------------------


def test_json_depth_skips_strings_and_stops_early():
    assert json_depth('{"a": [1, {"b": "[[[[{{{{"}]}') == 3
    assert json_depth('"unterminated [[[[') == 0
    assert json_depth("[" * 10**6, stop_above=32) == 33
    assert json_depth("x") == 0


def test_load_json_never_raises():
    assert load_json('{"a": [1]}') == ({"a": [1]}, None)
    assert load_json("[" * 5000 + "]" * 5000)[1][0] == "too_deep"
    assert (
        load_json("[" * 32 + "]" * 32)[1] is None and load_json("[" * 33 + "]" * 33, max_depth=32)[1][0] == "too_deep"
    )
    assert load_json("9" * 5000)[1][0] == "bad_json"  # past Python's int-string limit: ValueError, not JSONDecodeError
    value, problem = load_json("{'a': 1}")
    assert value is None and problem[0] == "bad_json" and "line 1 column 2" in problem[1]


def test_limits_refuse_the_turn_as_a_whole():
    many = call({"name": "python", "arguments": {"code": "1"}}) * 9
    assert len(parse_action(many, SCHEMAS).calls) == 9  # no call limit unless one is asked for
    parsed = parse_action(many, SCHEMAS, limits=ParseLimits(max_calls=8))
    [err] = parsed.items
    assert isinstance(err, ToolCallError) and err.kind == "too_many_calls" and "9 tool calls" in err.message
    assert not err.answerable and parsed.text == ""
    openai = json.dumps([{"function": {"name": "python", "arguments": "{}"}}] * 9)
    assert parse_action(openai, SCHEMAS, limits=ParseLimits(max_calls=8)).items[0].kind == "too_many_calls"
    [err] = parse_action("x" * 101, SCHEMAS, limits=ParseLimits(max_chars=100)).items
    assert err.kind == "too_large" and "101 characters" in err.message and "100" in err.message
    assert {"too_large", "too_many_calls"} == TURN_ERRORS


def test_arguments_no_program_can_take_are_bad_arguments():
    for text in ("a\x00b", "\ud800", "x\udc80"):
        [err] = parse_action(call({"name": "python", "arguments": {"code": text}}), SCHEMAS).items
        assert err.kind == "bad_arguments" and err.answerable and "plain text" in err.message
    assert invalid_char("print('é😀')") is None


# -- grading ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(timeout=6.0)
    yield v
    v.close()


@pytest.mark.parametrize(
    ("gold", "pred"),
    [
        ("\\frac{1}{2}", "0.5"),
        ("0.5", "\\dfrac{1}{2}"),
        ("204", "204.0"),
        ("33", " 33 "),
        ("70", "070"),
        ("1000", "1{,}000"),
        ("3\\sqrt{2}", "\\sqrt{18}"),
        ("\\frac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}"),
        ("x^2+2x+1", "(x+1)^2"),
        ("45^\\circ", "45"),
        ("18", "\\$18"),
    ],
)
def test_equivalent_forms_are_right(gold, pred, verifier):
    assert grade_answer(pred, gold, verifier).correct


@pytest.mark.parametrize(
    ("gold", "pred"),
    [
        ("204", "205"),
        ("33", "330"),
        ("\\frac{1}{2}", "\\frac{1}{3}"),
        ("0.5", "0.51"),
        ("3\\sqrt{2}", "2\\sqrt{3}"),
        ("x^2+1", "x^2-1"),
        ("12", "-12"),
    ],
)
def test_near_misses_are_wrong(gold, pred, verifier):
    assert not grade_answer(pred, gold, verifier).correct


def test_a_solution_with_several_boxes_is_graded_by_the_last(verifier):
    text = "A wrong try gives \\boxed{14}; correcting the count, the answer is \\boxed{ 17 }."
    grade = grade_response(text, "17", verifier)
    assert grade.correct and grade.predicted == "17"
    assert not grade_response("\\boxed{17} ... no wait, \\boxed{14}", "17", verifier).correct


def test_boxes_inside_tool_calls_do_not_count_and_no_box_is_wrong(verifier):
    text = call({"name": "python", "arguments": {"code": "print('\\\\boxed{9}')"}})
    assert grade_response(text, "9", verifier).method == "no_answer"
    assert grade_response("The answer is 9.", "9", verifier) == grade_response("", "9", verifier)
    assert not grade_response("The answer is 9.", "9", verifier).correct


def test_math_verify_runs_off_the_main_thread(verifier):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        grades = list(pool.map(lambda p: grade_answer(p, "\\sqrt{8}", verifier), ["2\\sqrt{2}", "3\\sqrt{2}"]))
    assert [g.correct for g in grades] == [True, False]
    assert grades[0].method == "math_verify"


def test_an_overrunning_comparison_is_cut_off_and_the_worker_recovers():
    slow = MathVerifier(timeout=0.3)  # math-verify's own alarm is 1 s: the outer kill fires first
    try:
        grade = grade_answer("1", "(10^{10^{7}})!", slow)
        assert (grade.correct, grade.method) == (False, "timeout")
        slow.timeout = 6.0
        assert slow.equal("\\sqrt{4}", "2") is True  # the killed worker is restarted on the next call
    finally:
        slow.close()


def test_normalisation_and_exact_values():
    assert normalize_answer("$\\left( 1, 2 \\right)$.") == "(1,2)"
    assert normalize_answer("\\text{(B)}") == "(B)"
    assert exact_value("-\\frac{3}{4}") == exact_value("-0.75")
    assert exact_value("\\frac{1}{0}") is None and exact_value("x") is None


def test_output_capping_keeps_head_and_tail():
    text, cut = cap_text("a" * 50 + "b" * 50, 30)
    assert cut and text.startswith("a" * 20) and text.endswith("b" * 10) and "70 characters cut" in text
    assert cap_text("short", 30) == ("short", False)
    assert last_error_line("Traceback...\n  File x\nValueError: bad\n") == "ValueError: bad"
