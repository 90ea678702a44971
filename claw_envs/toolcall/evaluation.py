"""Math answers on held-out problems (AIME 2024, GSM8K, files, the built-in set): an extension of the generic
evaluation (:mod:`claw_envs.evaluation`), whose success rate is avg@k and pass@k the unbiased pass@k.

Each record adds the predicted answer (the last ``\\boxed{}`` outside tool-call blocks, else a plain final-answer
line), the form it was read from (``answer_form``: ``boxed`` or ``final_answer_line``), how it was graded and the
number of tool calls; the summary adds how many final replies had no answer in either form and how many were read
from a line. The score (mean outcome) is the env's: +1 right, -1 wrong, for episodes and ``--responses`` alike; the
accuracy is the success rate.

``--responses FILE`` grades precomputed final responses with no model and no tools. FILE is JSONL, one object a
line: ``{"id": "<problem id>", "response": "<text>"}`` (lines may repeat an id, one sample each) or
``{"id": ..., "responses": ["<text>", ...]}``; ``problem_id``/``task_id`` are accepted for ``id``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from claw_envs.episodes import EpisodeResult, step_infos
from claw_envs.evaluation import Evaluation
from claw_envs.tasks import TaskSource, json_object
from claw_envs.tool_calls.parse import strip_tool_calls
from claw_envs.toolcall.boxed import final_answer_line, last_boxed
from claw_envs.toolcall.signals import grade_response

ID_KEYS = ("id", "problem_id", "task_id")


class AnswerEvaluation(Evaluation):
    """avg@k / pass@k of graded final answers."""

    score_name = "mean outcome (+1 right, -1 wrong)"
    success_name = "right"
    """The env's outcome (the headline score); the accuracy is the success rate (avg@k)."""

    def record(self, episode: EpisodeResult) -> dict[str, Any]:
        tags = [tag for info in step_infos(episode) for tag in info["next_state"].evaluative.tags]
        last = episode.actions[-1] if episode.actions else ""
        text = strip_tool_calls(last)
        return {
            "predicted": (last_boxed(text) or final_answer_line(text)) if episode.terminated else None,
            "answer_form": next((t.split("=", 1)[1] for t in tags if t.startswith("answer_form=")), None),
            "graded_by": next((t.split("=", 1)[1] for t in tags if t.startswith("graded_by=")), "no_answer"),
            "tool_calls": sum(int(t.split("=", 1)[1]) for t in tags if t.startswith("calls=")),
            "response": last,
        }

    def summary(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return {
            "no_answer": sum(r.get("predicted") is None for r in records),
            "line_answers": sum(r.get("answer_form") == "final_answer_line" for r in records),
        }

    def rows(self, summary: Mapping[str, Any]) -> list[tuple[str, str]]:
        return [
            ("no final answer (boxed or line)", str(summary.get("no_answer", 0))),
            ("answers read from a final-answer line", str(summary.get("line_answers", 0))),
        ]

    def grade_responses(self, path: Path, tasks: TaskSource) -> list[dict[str, Any]]:
        by_id = {t.id: t for t in tasks}
        try:
            lines = Path(path).read_text(encoding="utf-8").split("\n")  # not splitlines: U+2028 is text
        except OSError as err:
            raise ValueError(f"cannot read responses file {path}: {err.strerror or err}") from None
        records = []
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            pid, texts = _read_line(line, f"{path}:{lineno}")
            if pid not in by_id:
                sample = ", ".join(list(by_id)[:5])
                raise ValueError(f"{path}:{lineno}: no problem {pid!r} in the dataset (ids look like: {sample}, …)")
            answer = str(by_id[pid].data["answer"])
            for text in texts:
                grade = grade_response(text, answer)
                records.append(
                    {
                        "task_id": pid,
                        "answer": answer,
                        "outcome": grade.outcome,  # +1/-1 as in an episode, so the score means the same
                        "success": grade.correct,
                        "predicted": grade.predicted,
                        "graded_by": grade.method,
                        "response": text,
                        "status": "ok",
                    }
                )
        if not records:
            raise ValueError(f"{path}: no responses")
        return records


def _read_line(line: str, where: str) -> tuple[str, list[str]]:
    row = json_object(line, where)
    pid = next((row[key] for key in ID_KEYS if key in row), None)
    if pid is None:
        raise ValueError(f"{where}: no problem id (one of {', '.join(ID_KEYS)})")
    texts = row["responses"] if "responses" in row else [row.get("response")]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError(f'{where}: need "response": "<text>" or "responses": ["<text>", ...]')
    return str(pid), texts
