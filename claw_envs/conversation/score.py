"""Reading one reply for the personalization rubric (:mod:`.rubric`): whether it is a valid reply
(:func:`reply_problem`), the number it gives as its answer, and the named checks a persona's preferences use.

A valid reply is a non-empty, readable, English, natural-language reply of sane length; whether its final number
is right (``answer_correct``) is reported beside the rubric's score, never mixed into it.

Checks are named functions in :data:`CHECKS`; a persona file lists which ones it cares about (with
parameters), so a new persona can reuse them or add regex preferences (``matches``/``not_matches``).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from claw_envs.conversation.signals import sentences
from claw_envs.conversation.tasks import NUMBER, Number, Problem, StudentWork, numbers_in

MAX_REPLY_CHARS = 4000
"""A reply longer than this is not read past this point and is not a valid reply."""

INVALID_KINDS = ("empty", "too_long", "cut_off", "junk", "tool_call", "degenerate", "language", "terse")

_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")
_ENGLISH = frozenset(
    """a about after all also am an and answer answers any are as at be because been before but by can
    check correct could did do does done each equal equals every final first for from get gets give go good
    got great had has have he her here his how i if in into is it its just left less like look make many
    me more much my need nice no not now of off ok okay on one only or our out over per right same see she
    should so some step steps take than that the their them then there these they this those to too total
    two up us use was way we well were what when which who why will with work would yes you your""".split()  # noqa: SIM905
)
_TOOL_TAG = re.compile(r"<(tool_call|function_call|function)\b[^>]*>.*?(?:</\1>|$)", re.S | re.I)
_FENCE = re.compile(r"```.*?(?:```|$)", re.S)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_RUN = re.compile(r"(\S)\1{24,}")
_LIST_MARKER = re.compile(r"[ \t>*#]*(?:step\s*)?\d+(?:[.):]|\s*[-–])(?=\s|$)", re.I)
"""A line's numbered-list marker, the whole of what it matches at the line's start (``1.``, ``2)``, ``Step 3:``)."""
_RESULT_BEFORE = re.compile(
    r"(?:=|\bis|['’]s|\bgives?|\bget|\bgot|\bmakes?|\btotal|\bleaves?|\bleft(?: with)?|\bequals?|\bso)"
    r"[\s$*:]*\Z",
    re.I,
)
"""What, just before a number, makes it a result rather than a number repeated from the question."""
_ANSWER_MARK = re.compile(
    r"(?:answer|should be|comes out to|comes to|equals|\\boxed\{)[\s*:=$]*(?:is|was|would be|should be|of)?[\s*:=$]*"
    r"(-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)",
    re.I,
)


# -- validity ----------------------------------------------------------------------------------


def _is_tool_json(text: str) -> bool:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than json can read, not a tool call
        return False
    items = obj if isinstance(obj, list) else [obj]
    return bool(items) and all(
        isinstance(i, dict) and ({"name", "tool", "function", "arguments", "tool_calls"} & set(i)) for i in items
    )


def _strip_tool_calls(text: str) -> tuple[str, bool]:
    """The reply without tool-call markup, and whether there was any."""
    rest = _TOOL_TAG.sub(" ", text)
    found = rest != text
    fenced = [m for m in _FENCE.finditer(rest) if _is_tool_json(m.group().strip("`").removeprefix("json").strip())]
    for m in reversed(fenced):
        rest = rest[: m.start()] + " " + rest[m.end() :]
    found = found or bool(fenced)
    if _is_tool_json(rest.strip()):
        return "", True
    return rest, found


def reply_problem(reply: str) -> str | None:
    """Why ``reply`` is not a valid natural-language reply, or ``None`` when it is.

    One of :data:`INVALID_KINDS` but ``cut_off`` (which only :func:`.rubric.rubric` knows, from the finish reason):
    ``empty``; ``too_long`` (over :data:`MAX_REPLY_CHARS`); ``junk``
    (undecodable bytes, control characters); ``tool_call`` (only a tool call); ``degenerate`` (no
    words, endless repetition, absurd tokens); ``language`` (not English, or gibberish); ``terse``
    (fewer than two words and numbers together).
    """
    text = reply.strip()
    if not text:
        return "empty"
    if len(reply) > MAX_REPLY_CHARS:
        return "too_long"
    bad = sum(1 for c in text if c == "\ufffd" or (unicodedata.category(c)[0] == "C" and c not in "\n\r\t"))
    if bad / len(text) > 0.05:
        return "junk"
    rest, had_tool = _strip_tool_calls(text)
    words = _WORD.findall(rest)
    if had_tool and len(words) < 2:
        return "tool_call"
    numbers = numbers_in(rest)
    if not words:
        return "terse" if numbers else "degenerate"
    if _RUN.search(rest) or max(len(w) for w in words) > 30:
        return "degenerate"
    lowered = [w.lower().replace("’", "'") for w in words]
    if len(words) >= 8 and len(set(lowered)) / len(words) < 0.3:
        return "degenerate"
    letters = [c for c in rest if c.isalpha()]
    if sum(1 for c in letters if ord(c) > 0x24F) > 0.3 * len(letters):
        return "language"
    english = sum(1 for w in lowered if w in _ENGLISH or w.split("'")[0] in _ENGLISH)
    if (len(words) >= 3 and english == 0) or (len(words) >= 12 and english / len(words) < 0.1):
        return "language"
    if len(words) + len(numbers) < 2:
        return "terse"
    return None


def is_valid_reply(reply: str) -> bool:
    """A non-empty, readable, English, natural-language reply of sane length (see :func:`reply_problem`)."""
    return reply_problem(reply) is None


def final_number(reply: str, question: str | None = None) -> float | None:
    """The number the reply gives as its answer: after the last "answer is / should be / =" marker, else the last
    number that answers something. A list marker ("1.", "2)", "Step 3") answers nothing, nor does a number of
    ``question`` left dangling (one not after a "=", "is", "gives" and the like): the reply then states no answer."""
    marks = list(_ANSWER_MARK.finditer(reply))
    if marks:
        return float(marks[-1].group(1).replace(",", ""))
    stated = [m for m in NUMBER.finditer(reply) if not _is_list_marker(reply, m)]
    if not stated:
        return None
    last = stated[-1]
    value = float(last.group().replace(",", ""))
    if question is not None and value in numbers_in(question) and not _RESULT_BEFORE.search(reply[: last.start()]):
        return None
    return value


def _is_list_marker(text: str, number: re.Match[str]) -> bool:
    marker = _LIST_MARKER.match(text, text.rfind("\n", 0, number.start()) + 1)
    return marker is not None and marker.end() >= number.end()


def answer_correct(reply: str, answer: Number, question: str | None = None) -> bool:
    """Whether the reply's final number equals ``answer`` (reported beside the rubric, not in it)."""
    got = final_number(reply[:MAX_REPLY_CHARS], question)
    return got is not None and abs(got - float(answer)) <= 1e-6 * max(1.0, abs(float(answer)))


# -- preference checks -------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckContext:
    """What a check sees: the reply (``prose`` has code blocks and inline code blanked out)."""

    reply: str
    prose: str
    problem: Problem
    work: StudentWork | None = None


_BOLD = re.compile(r"\*\*(?=\S)[^\n]*?(?<=\S)\*\*|__(?=\S)[^\n]*?(?<=\S)__|<(b|strong)>", re.I)
_HEADER = re.compile(r"^ {0,3}#{1,6}[ \t]+\S|^[^\n]*\S[^\n]*\n {0,3}(?:=+|-{2,})[ \t]*$", re.M)
_STEP_LIST = re.compile(r"\bstep\s*\d+\s*[:.)-]|^\s*(?:\d+[.)]|[-*•+])\s+\S", re.M | re.I)
_CASUAL = re.compile(
    r"\b(?:ok|okay|so|just|yeah|yep|basically|pretty|kinda|gonna|lol|tbh|easy|i think|i got|you get|you just)\b"
    r"|\b[a-z]+['’](?:s|re|ll|d|ve|m|t)\b",
    re.I,
)
_FORMAL = re.compile(
    r"final answer|step[- ]by[- ]step|\btherefore\b|\bthus\b|\bhence\b|in conclusion|to solve this|"
    r"let['’]?s (?:solve|break|calculate|compute|start|begin|find|work)|\blet us\b|\bcertainly\b|i hope this helps|"
    r"as an ai|\bsolution\b|here['’]?s (?:how|the|a)\b|\bwe need to\b|\bfirstly\b|\bsecondly\b|\bfinally,|"
    r"\bgiven:|\bwe can\b|\bin summary\b",
    re.I,
)
_POSITIVE = re.compile(r"\b(?:correct|right|spot on|nailed it|all good|perfect)\b", re.I)
_NEGATIVE = re.compile(
    r"\b(?:not quite|incorrect|wrong|mistake|slip|error|should be|off by|isn['’]?t (?:quite )?(?:right|correct)|"
    r"not (?:quite )?(?:right|correct)|doesn['’]?t add up)\b",
    re.I,
)
_ADDRESS = re.compile(r"\b(?:you|your|you['’]re|you['’]ve|student['’]?s?|their)\b", re.I)
_ENCOURAGING = re.compile(
    r"\b(?:nice|great|good (?:job|try|work|effort|start|thinking)|well done|keep (?:it up|going|trying)|almost there|"
    r"so close|you['’]re close|awesome|proud|you['’]?ve got this|you got this|don['’]?t worry|excellent|amazing|"
    r"brilliant|fantastic|way to go|love (?:how|that|the way))\b",
    re.I,
)
_HARSH = re.compile(
    r"\b(?:careless|terrible|lazy|stupid|sloppy|obviously|awful|pathetic|useless|should have known|silly mistake)\b",
    re.I,
)
_EMOJI = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\u2b50\u2b55]")


def _well_formed(ctx: CheckContext) -> bool:
    return is_valid_reply(ctx.reply) and final_number(ctx.reply, ctx.problem.question) is not None


def _no_bold(ctx: CheckContext) -> bool:
    return not _BOLD.search(ctx.prose)


def _no_headers(ctx: CheckContext) -> bool:
    return not _HEADER.search(ctx.prose)


def _no_step_list(ctx: CheckContext) -> bool:
    return not _STEP_LIST.search(ctx.prose)


def _short(ctx: CheckContext, max_chars: int = 250, max_lines: int = 2) -> bool:
    text = ctx.reply.strip()
    return len(text) <= max_chars and sum(1 for line in text.splitlines() if line.strip()) <= max_lines


def _casual(ctx: CheckContext) -> bool:
    return bool(_CASUAL.search(ctx.prose)) and not _FORMAL.search(ctx.prose)


def _verdict(ctx: CheckContext) -> bool:
    if ctx.work is None:
        return False
    if ctx.work.correct:
        return bool(_POSITIVE.search(ctx.prose)) and not _NEGATIVE.search(ctx.prose)
    return bool(_NEGATIVE.search(ctx.prose))


def _specific(ctx: CheckContext) -> bool:
    if ctx.work is None:
        return False
    wrote = ctx.work.numbers()
    return any(_ADDRESS.search(s) and any(n in wrote for n in numbers_in(s)) for s in sentences(ctx.prose))


def _encouraging(ctx: CheckContext) -> bool:
    return bool(_ENCOURAGING.search(ctx.prose)) and not _HARSH.search(ctx.prose)


def _emoji(ctx: CheckContext) -> bool:
    return bool(_EMOJI.search(ctx.reply))


def _matches(ctx: CheckContext, pattern: str) -> bool:
    return re.search(pattern, ctx.reply, re.I | re.M) is not None


def _not_matches(ctx: CheckContext, pattern: str) -> bool:
    return re.search(pattern, ctx.reply, re.I | re.M) is None


CHECKS: dict[str, Callable[..., bool]] = {
    "well_formed": _well_formed,
    "no_bold": _no_bold,
    "no_headers": _no_headers,
    "no_step_list": _no_step_list,
    "short": _short,
    "casual": _casual,
    "verdict": _verdict,
    "specific": _specific,
    "encouraging": _encouraging,
    "emoji": _emoji,
    "matches": _matches,
    "not_matches": _not_matches,
}
"""Preference checks by name. ``well_formed``: valid reply stating an answer (:func:`final_number`).
``no_bold`` / ``no_headers`` / ``no_step_list``: no markdown bold, headings, "Step 1:" or numbered/bulleted lists
(code is ignored).
``short(max_chars, max_lines)``. ``casual``: a casual marker and no textbook/assistant phrases.
``verdict``: says right or wrong, and the verdict matches the student's work. ``specific``: a sentence
addressing the student names a number from their work. ``encouraging``: kind words, nothing harsh.
``emoji``: at least one emoji. ``matches`` / ``not_matches(pattern)``: a regex a persona file supplies."""


def context(reply: str, problem: Problem, work: StudentWork | None = None) -> CheckContext:
    """The view of ``reply`` every check reads."""
    return CheckContext(reply=reply, prose=_INLINE_CODE.sub(" ", _FENCE.sub(" ", reply)), problem=problem, work=work)
