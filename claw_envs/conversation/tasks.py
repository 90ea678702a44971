"""Homework for the simulated users: easy procedural word problems and GSM8K-format loaders.

The built-in generator writes grade-school problems (one or two operations, exact positive integer answers)
from a seed, sized so the offline tiny model can learn their arithmetic: operands below 20, products of at
most 5 x 9, every number below 50 (with two-digit operands the tiny model got 10% of its answers right, and the
simulated student re-asks for every wrong one). Train and test draw from disjoint seed ranges *and* from disjoint
halves of the problem space (a problem's split is fixed by a hash of its text), so no question can appear in both.
GSM8K rows (``question``, ``answer`` ending in ``#### N``) load from a JSONL path
or, only when asked, from the Hugging Face id ``openai/gsm8k``.

For the teacher persona every problem also has a deterministic :class:`StudentWork` — a worked
solution that is right or wrong, derived from the problem's own content hash.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from claw_envs.tasks import ProceduralTasks, Task, TaskList, TaskSource, content_hash, load_hf, load_jsonl

Number = int | float

TRAIN_SEEDS = range(0, 1_000_000)
TEST_SEEDS = range(10_000_000, 10_010_000)
TEST_SHARE = 8  # one problem text in eight belongs to the test split

_NAMES = [
    ("Maya", "she"),
    ("Leo", "he"),
    ("Ava", "she"),
    ("Noah", "he"),
    ("Zoe", "she"),
    ("Omar", "he"),
    ("Lily", "she"),
    ("Ben", "he"),
    ("Rosa", "she"),
    ("Kai", "he"),
    ("Nina", "she"),
    ("Tom", "he"),
    ("Iris", "she"),
    ("Sam", "he"),
    ("Emma", "she"),
    ("Jack", "he"),
]
_ITEMS = [
    "apples",
    "pencils",
    "stickers",
    "marbles",
    "cookies",
    "books",
    "crayons",
    "cards",
    "shells",
    "stamps",
    "balloons",
    "beads",
    "oranges",
    "erasers",
    "candies",
    "blocks",
]
_THINGS = ["notebook", "juice box", "toy car", "comic", "yo-yo", "muffin", "pen", "ball"]


@dataclass(frozen=True)
class Step:
    """One arithmetic step as a student would write it: ``expr = result``."""

    expr: str
    result: Number

    def __str__(self) -> str:
        return f"{self.expr} = {fmt(self.result)}"


@dataclass(frozen=True)
class Problem:
    """A homework problem: the question, its exact answer and the worked steps."""

    id: str
    question: str
    answer: Number
    steps: tuple[Step, ...] = ()

    @classmethod
    def from_task(cls, task: Task) -> Problem:
        """Read a built-in task (``steps`` given) or a GSM8K row (``answer`` text ending in ``#### N``)."""
        data = task.data
        if "question" not in data or "answer" not in data:
            raise ValueError(f"task {task.id!r} needs 'question' and 'answer' fields, has {sorted(data)}")
        if isinstance(data["answer"], str):
            answer, steps = parse_gsm8k_answer(str(data["answer"]), task.id)
        else:
            answer = data["answer"]
            steps = tuple(Step(str(e), r) for e, r in data.get("steps", ()))
        return cls(id=task.id, question=str(data["question"]).strip(), answer=answer, steps=steps)


@dataclass(frozen=True)
class StudentWork:
    """A student's worked solution to a problem (for the teacher persona), right or wrong."""

    steps: tuple[Step, ...]
    final: Number
    correct: bool
    bad_index: int | None = None  # which step holds the slip when the work is wrong

    def text(self) -> str:
        """The work as the student writes it: one step a line, then the final answer."""
        lines = [str(s) for s in self.steps]
        lines.append(f"So the answer is {fmt(self.final)}.")
        return "\n".join(lines)

    def numbers(self) -> set[float]:
        """Every number the student wrote."""
        return {float(x) for x in numbers_in(self.text())}


def fmt(x: Number) -> str:
    """A number as a person writes it: ``12``, ``2.5`` (never ``12.0``)."""
    f = float(x)
    return str(int(f)) if f.is_integer() else f"{f:.6g}"


NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
"""A number as a reply writes it (``1,200``, ``-3.5``)."""


def numbers_in(text: str) -> list[float]:
    """Numbers in ``text`` in order (``1,200`` and ``-3.5`` included; ``17-4`` gives 17 and 4)."""
    return [float(m.group().replace(",", "")) for m in NUMBER.finditer(text)]


def parse_gsm8k_answer(answer: str, task_id: str = "?") -> tuple[Number, tuple[Step, ...]]:
    """The final number after ``####`` and the ``<<expr=result>>`` calculator steps of a GSM8K answer."""
    head, sep, tail = answer.rpartition("####")
    nums = numbers_in(tail) if sep else []
    if not nums:
        raise ValueError(f"task {task_id!r}: a GSM8K answer must end with '#### <number>', got {answer[-60:]!r}")
    final = nums[0]
    steps = []
    for expr, result in re.findall(r"<<([^=<>]+)=([^<>]+)>>", head):
        values = numbers_in(result)
        if values:
            steps.append(Step(_spaced(expr), _num(values[0])))
    return _num(final), tuple(steps)


def _spaced(expr: str) -> str:
    expr = re.sub(r"\s*([+\-*/x])\s*", r" \1 ", expr.strip()).replace(" * ", " x ")
    return re.sub(r"\s+", " ", expr).strip()


def _num(x: float) -> Number:
    return int(x) if float(x).is_integer() else x


# -- the procedural generator ------------------------------------------------------------------


def _add(rng: np.random.Generator, name: str, pron: str, items: str, thing: str) -> tuple[str, list]:
    a, b = int(rng.integers(2, 10)), int(rng.integers(2, 10))
    q = f"{name} has {a} {items}. {pron.capitalize()} gets {b} more. How many {items} does {name} have now?"
    return q, [(f"{a} + {b}", a + b)]


def _sub(rng, name, pron, items, thing):
    b, left = int(rng.integers(1, 10)), int(rng.integers(1, 10))
    a = b + left
    q = f"{name} had {a} {items} and gave {b} of them to a friend. How many {items} does {name} have left?"
    return q, [(f"{a} - {b}", left)]


def _mul(rng, name, pron, items, thing):
    a, b = int(rng.integers(2, 6)), int(rng.integers(2, 10))
    q = f"There are {a} bags with {b} {items} in each bag. How many {items} are there in all?"
    return q, [(f"{a} x {b}", a * b)]


def _div(rng, name, pron, items, thing):
    a, each = int(rng.integers(2, 6)), int(rng.integers(2, 10))
    q = f"{name} puts {a * each} {items} into {a} equal groups. How many {items} are in each group?"
    return q, [(f"{a * each} / {a}", each)]


def _add_sub(rng, name, pron, items, thing):
    a, b = int(rng.integers(2, 10)), int(rng.integers(2, 10))
    c = int(rng.integers(1, min(10, a + b)))
    q = f"{name} has {a} {items}. {pron.capitalize()} buys {b} more and then loses {c}. How many {items} are left?"
    return q, [(f"{a} + {b}", a + b), (f"{a + b} - {c}", a + b - c)]


def _mul_add(rng, name, pron, items, thing):
    a, b, c = int(rng.integers(2, 6)), int(rng.integers(2, 6)), int(rng.integers(1, 10))
    q = (
        f"{name} buys {a} packs of {items} with {b} in each pack. {pron.capitalize()} already had {c}. "
        f"How many {items} does {name} have now?"
    )
    return q, [(f"{a} x {b}", a * b), (f"{a * b} + {c}", a * b + c)]


def _change(rng, name, pron, items, thing):
    a, b = int(rng.integers(2, 6)), int(rng.integers(2, 5))
    bill = 10 if a * b < 10 else 20 if a * b < 20 else 50
    q = (
        f"A {thing} costs {a} dollars. {name} buys {b} of them and pays with a {bill} dollar bill. "
        f"How many dollars of change does {name} get?"
    )
    return q, [(f"{a} x {b}", a * b), (f"{bill} - {a * b}", bill - a * b)]


def _pages(rng, name, pron, items, thing):
    a, b = int(rng.integers(2, 10)), int(rng.integers(2, 6))
    q = f"{name} reads {a} pages every day for {b} days. How many pages does {name} read in total?"
    return q, [(f"{a} x {b}", a * b)]


def _sub_sub(rng, name, pron, items, thing):
    a = int(rng.integers(11, 19))
    b = int(rng.integers(1, 10))
    c = int(rng.integers(1, min(10, a - b)))
    q = f"A class has {a} students. {b} go to art and {c} go to music. How many students are left in the room?"
    return q, [(f"{a} - {b}", a - b), (f"{a - b} - {c}", a - b - c)]


TEMPLATES: dict[str, Callable[..., tuple[str, list]]] = {
    "add": _add,
    "sub": _sub,
    "mul": _mul,
    "div": _div,
    "add_sub": _add_sub,
    "mul_add": _mul_add,
    "change": _change,
    "pages": _pages,
    "sub_sub": _sub_sub,
}


def split_of(question: str) -> str:
    """The split a problem text belongs to (fixed by its hash, so train and test never share a question)."""
    return "test" if int(hashlib.sha256(question.encode()).hexdigest()[:8], 16) % TEST_SHARE == 0 else "train"


def make_problem(seed: int, split: str) -> dict[str, Any]:
    """The task data of built-in problem ``seed`` in ``split`` (draws until the text belongs to ``split``)."""
    rng = np.random.default_rng([seed, 0xC1A3])
    while True:
        template = list(TEMPLATES)[int(rng.integers(len(TEMPLATES)))]
        name, pron = _NAMES[int(rng.integers(len(_NAMES)))]
        items = _ITEMS[int(rng.integers(len(_ITEMS)))]
        thing = _THINGS[int(rng.integers(len(_THINGS)))]
        question, steps = TEMPLATES[template](rng, name, pron, items, thing)
        if split_of(question) == split:
            return {"question": question, "answer": steps[-1][1], "steps": steps, "template": template}


def builtin_tasks(split: str = "train") -> TaskSource:
    """Unlimited built-in homework: ``homework-<split>-<seed>``."""
    seeds = {"train": TRAIN_SEEDS, "test": TEST_SEEDS}
    if split not in seeds:
        raise ValueError(f"built-in homework has splits 'train' and 'test', not {split!r}")
    return ProceduralTasks(lambda s: make_problem(s, split), seeds[split], split, f"homework-{split}")


GSM8K_LOCAL = (
    "A GSM8K-format JSONL file works in its place: --tasks gsm8k_test.jsonl "
    '(rows as on the hub: {"question": "...", "answer": "... #### 72"})'
)


def load_gsm8k(path_or_id: str | Path, split: str = "test") -> TaskList:
    """GSM8K-format problems from a JSONL path, or from the Hugging Face id ``openai/gsm8k`` (hub access).

    Every row is checked up front: a missing field or an answer without ``#### N`` raises ``ValueError``
    naming the row.
    """
    path = Path(path_or_id)
    if path.exists():
        tasks = load_jsonl(path, split=split, prefix=f"gsm8k-{split}")
    elif str(path_or_id).count("/") == 1 and not path.suffix and not str(path_or_id).startswith((".", "/", "~")):
        try:
            tasks = load_hf(str(path_or_id), split=split, config="main", local_form=GSM8K_LOCAL)
        except Exception as err:  # datasets raises many types (offline, not found, bad config)
            raise RuntimeError(f"could not load {path_or_id!s} ({split}) from the Hugging Face hub: {err}") from err
    else:
        raise FileNotFoundError(f"no GSM8K file at {path_or_id!s} (give a JSONL path or the id 'openai/gsm8k')")
    for task in tasks:
        Problem.from_task(task)
    return tasks


def student_work(problem: Problem) -> StudentWork:
    """The student's attempt at ``problem`` shown to the teacher: right or wrong, fixed by the problem's content."""
    rng = np.random.default_rng(int(content_hash({"q": problem.question, "a": problem.answer})[:12], 16))
    steps = list(problem.steps)
    if rng.random() < 0.5:
        return StudentWork(tuple(steps), problem.answer, correct=True)
    deltas = [d for d in (1, 2, 3, -1, -2, 10) if float(problem.answer) + d > 0]
    wrong = _num(float(problem.answer) + deltas[int(rng.integers(len(deltas)))])
    if not steps:
        return StudentWork((), wrong, correct=False)
    steps[-1] = Step(steps[-1].expr, wrong)
    return StudentWork(tuple(steps), wrong, correct=False, bad_index=len(steps) - 1)


def problem_fields(problem: Problem, work: StudentWork | None = None) -> Mapping[str, str]:
    """Placeholders for persona templates (openings and reference replies).

    ``question``, ``answer``, ``steps`` (``12 + 5 = 17, then 17 - 4 = 13``), ``steps_is`` (``… is …``),
    and for graded work ``work``, ``student_answer``, ``good_step``, ``bad_step``, ``fixed_step``.
    A field that does not apply (no correct step to praise, no slip) is absent.
    """
    steps = problem.steps[-2:]
    fields = {"question": problem.question, "answer": fmt(problem.answer)}
    if steps:
        fields["steps"] = ", then ".join(str(s) for s in steps)
        fields["steps_is"] = ", then ".join(f"{s.expr} is {fmt(s.result)}" for s in steps)
    if work is not None:
        fields["work"] = work.text()
        fields["student_answer"] = fmt(work.final)
        good = [s for i, s in enumerate(work.steps) if i != work.bad_index]
        if good:
            fields["good_step"] = str(good[-1])
        if work.bad_index is not None:
            fields["bad_step"] = str(work.steps[work.bad_index])
            fields["fixed_step"] = str(problem.steps[work.bad_index])
    return fields
