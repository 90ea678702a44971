"""Is a final answer right? math-verify with a time limit, behind a normalised-string rule.

The rule, in order:

1. No ``\\boxed{...}`` in the response: wrong (``method="no_answer"``). Several boxes: the last one counts.
2. The normalised strings are equal, or both are exact numbers (integers, decimals, ``a/b``,
   ``\\frac{a}{b}``) with the same value: right (``"string"``). Two different integers: wrong, at once.
3. Otherwise math-verify decides (``"math_verify"``): it parses both sides to SymPy and compares them
   (``3\\sqrt{2}`` = ``\\sqrt{18}``, ``10\\%`` = ``0.1``).
4. math-verify overran its time limit or failed: wrong (``"timeout"``) — step 2 is then all there is.

Bounds: an answer longer than :data:`MAX_ANSWER_CHARS` is wrong without being read (``"too_long"``), and
a number with more than :data:`MAX_EXACT_DIGITS` digits is not converted (Python refuses over 4300 by
default, and SymPy would spend seconds on it): it only matches its own spelling. No input raises.

math-verify limits its own time with ``signal.alarm``, which only works on the main thread (off it,
``parse``/``verify`` raise ``ValueError``) and would cancel any other ``SIGALRM`` timer in the process
(pytest-timeout's, for one). So it runs in a worker process (:mod:`.verify_worker`) where its alarms are
harmless; this side waits with a wall-clock limit and kills the worker if it overruns. Grading therefore
works from any thread, event loop or Ray actor.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Literal

from claw_envs.tool_calls.parse import strip_tool_calls
from claw_envs.toolcall.boxed import last_boxed

Method = Literal["string", "math_verify", "timeout", "no_answer", "too_long"]

MAX_ANSWER_CHARS = 1000
"""Longest final answer graded, in characters (a real one is a number or a short expression)."""
MAX_EXACT_DIGITS = 1000
"""Longest run of digits converted to an exact number (below Python's int-string limit of 4300)."""


@dataclass(frozen=True)
class Grade:
    """The verdict on one response: ``predicted`` is the extracted final answer (``None``: none given)."""

    correct: bool
    predicted: str | None
    method: Method

    @property
    def outcome(self) -> float:
        """``1.0`` when correct, else ``-1.0``."""
        return 1.0 if self.correct else -1.0


def normalize_answer(text: str) -> str:
    """A canonical spelling: no ``$``, spacing macros, ``\\left``/``\\right``, ``\\text{}``, degree or
    percent signs, thousands separators, whitespace, or trailing full stop; ``\\dfrac`` → ``\\frac``."""
    s = text.strip().replace("\\$", "").replace("$", "")
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"\\(?:left|right|displaystyle)(?![a-zA-Z])", "", s)
    s = re.sub(r"\\[,;:! ]", "", s).replace("~", "")
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\^\s*\{?\\circ\}?", "", s).replace("\\%", "").replace("%", "")
    s = s.replace("{,}", ",")
    s = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", s)
    s = re.sub(r"\s+", "", s)
    return s.rstrip(".")


_LONG_DIGITS = re.compile(rf"\d{{{MAX_EXACT_DIGITS + 1}}}")
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_RATIOS = (
    re.compile(r"([+-]?)\\frac\{([+-]?\d+)\}\{(\d+)\}"),
    re.compile(r"([+-]?)\\frac(\d)(\d)"),
    re.compile(r"([+-]?)([+-]?\d+)/(\d+)"),
)


def exact_value(text: str) -> Fraction | None:
    """The exact rational value of a plain number (``-12``, ``204.0``, ``3/4``, ``\\frac{3}{4}``), else ``None``."""
    s = normalize_answer(text)
    if _LONG_DIGITS.search(s):
        return None
    if _DECIMAL.fullmatch(s):
        return Fraction(s)
    for pattern in _RATIOS:
        if (m := pattern.fullmatch(s)) is not None:
            sign, num, den = m.groups()
            if int(den) == 0:
                return None
            value = Fraction(int(num), int(den))
            return -value if sign == "-" else value
    return None


def strings_match(gold: str, pred: str) -> bool:
    """Rule 2 of the module docstring."""
    g, p = normalize_answer(gold), normalize_answer(pred)
    if g and g == p:
        return True
    vg, vp = exact_value(gold), exact_value(pred)
    return vg is not None and vg == vp


class MathVerifier:
    """math-verify in a worker process; ``equal`` gives up after ``timeout`` seconds (thread-safe)."""

    def __init__(self, timeout: float = 5.0, startup_timeout: float = 60.0):
        self.timeout = timeout
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._lock = threading.Lock()

    def equal(self, gold: str, pred: str) -> bool | None:
        """Whether math-verify finds ``pred`` equal to ``gold``; ``None`` when it overran or failed."""
        with self._lock:
            try:
                proc = self._ensure_started()
                request = {"gold": gold, "pred": pred, "timeout": max(1, int(self.timeout / 3))}
                assert proc.stdin is not None
                proc.stdin.write((json.dumps(request) + "\n").encode())
                proc.stdin.flush()
                reply = self._read_line(self.timeout + 0.5)
            except (OSError, TimeoutError, ValueError):
                self._kill()
                return None
        return reply.get("equal") if isinstance(reply.get("equal"), bool) else None

    def close(self) -> None:
        """Stop the worker (a later ``equal`` starts a new one)."""
        with self._lock:
            self._kill()

    def _ensure_started(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        self._buf = b""
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "claw_envs.toolcall.verify_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        if not self._read_line(self.startup_timeout).get("ready"):
            raise ValueError("math-verify worker did not start")
        return self._proc

    def _read_line(self, limit: float) -> dict:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + limit
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("math-verify worker overran its time limit")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise OSError("math-verify worker exited")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        data = json.loads(line)
        if not isinstance(data, dict):
            raise ValueError("math-verify worker sent a non-object")
        return data

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            for pipe in (self._proc.stdin, self._proc.stdout):
                if pipe is not None:
                    pipe.close()
        self._proc = None
        self._buf = b""


_DEFAULT: MathVerifier | None = None
_DEFAULT_LOCK = threading.Lock()


def default_verifier() -> MathVerifier:
    """The process-wide verifier (started on first use, stopped at exit)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = MathVerifier()
            atexit.register(_DEFAULT.close)
        return _DEFAULT


def grade_answer(predicted: str | None, gold: str, verifier: MathVerifier | None = None) -> Grade:
    """Grade an extracted final answer against the reference ``gold`` (rules 2–4 of the module docstring)."""
    if predicted is None or not predicted.strip():
        return Grade(False, predicted, "no_answer")
    if len(predicted) > MAX_ANSWER_CHARS:
        return Grade(False, predicted, "too_long")
    gold = last_boxed(gold) or gold
    if strings_match(gold, predicted):
        return Grade(True, predicted, "string")
    vg, vp = exact_value(gold), exact_value(predicted)
    if vg is not None and vp is not None and vg.denominator == vp.denominator == 1:
        return Grade(False, predicted, "string")
    if _LONG_DIGITS.search(gold) or _LONG_DIGITS.search(predicted):
        return Grade(False, predicted, "string")  # equal spellings matched above; too long for SymPy
    equal = (verifier or default_verifier()).equal(gold, predicted)
    if equal is None:
        return Grade(False, predicted, "timeout")
    return Grade(equal, predicted, "math_verify")


def grade_response(response: str, gold: str, verifier: MathVerifier | None = None) -> Grade:
    """Grade a whole response: its last ``\\boxed{}`` outside tool-call blocks is the final answer."""
    return grade_answer(last_boxed(strip_tool_calls(response)), gold, verifier)
