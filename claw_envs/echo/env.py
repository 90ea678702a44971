"""The reference environment: repeat a phrase exactly."""

from __future__ import annotations

from typing import Any

from claw_envs.core import ClawEnv, Evaluative, NextState, Opening, Transition
from claw_envs.tasks import Task, TaskList, TaskSource, load_jsonl

PHRASES = {
    "train": ["hello world", "the cat sat", "green tea, no sugar", "42 is the answer", "a b c", "see you soon"],
    "test": ["blue sky at noon", "three small boats", "keep it short"],
}


def load_tasks(path: str, *, split: str = "test") -> TaskList:
    """Your own phrases: a JSONL file with a ``phrase`` field per line (``--tasks phrases.jsonl``)."""
    tasks = load_jsonl(path, split=split)
    for task in tasks:
        if not isinstance(task.data.get("phrase"), str) or not task.data["phrase"].strip():
            raise ValueError(f"{path}: task {task.id!r} needs a non-empty 'phrase' string")
    return tasks


class EchoEnv(ClawEnv):
    """Reply with exactly the phrase the task shows (whitespace at the ends is ignored)."""

    default_max_turns = 3

    @classmethod
    def default_tasks(cls, split: str = "train") -> TaskSource:
        if split not in PHRASES:
            raise ValueError(f"EchoEnv has splits {sorted(PHRASES)}, not {split!r}")
        return TaskList([Task(f"echo-{split}-{i}", split, {"phrase": p}) for i, p in enumerate(PHRASES[split])], split)

    def _prompt(self, task: Task) -> str:
        return f"Repeat exactly, with nothing else: {task.data['phrase']}"

    async def _begin(self, task: Task) -> Opening:
        prompt = self._prompt(task)
        return Opening(observation=prompt, messages=[{"role": "user", "content": prompt}])

    async def _act(self, action: str) -> Transition:
        target = self.task.data["phrase"]
        inputs = {"task": self._prompt(self.task), "action": action}
        if action.strip() == target:
            text = "Correct."
            ns = NextState(
                text=text,
                evaluative=Evaluative(1.0, ("match",)),
                outcome=1.0,
                judge_inputs={**inputs, "result": text},
            )
            return Transition(observation=text, next_state=ns, reward=1.0, terminated=True)
        text = f"Wrong: you sent {action.strip()[:80]!r}."
        ns = NextState(
            text=text,
            evaluative=Evaluative(-1.0, ("mismatch",)),
            directive=f"Reply with exactly {target!r} and nothing else.",
            judge_inputs={**inputs, "result": text},
        )
        return Transition(observation=text, next_state=ns)

    def _final_outcome(self) -> float | None:
        return -1.0

    def reference_action(self) -> str | None:
        return None if self.task is None else self.task.data["phrase"]

    def demonstrations(self, n: int, seed: int = 0) -> list[dict[str, Any]]:
        tasks = list(self.default_tasks("train"))
        return [
            {"messages": [{"role": "user", "content": self._prompt(t)}], "completion": t.data["phrase"]}
            for t in (tasks[(seed + i) % len(tasks)] for i in range(n))
        ]
