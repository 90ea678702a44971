"""``claw-eval --env swe``: the resolved rate, with a policy or with ``--predictions FILE``.

Each episode's record adds whether the instance was resolved, the per-test report (swebench's shape:
``tests_status`` with FAIL_TO_PASS / PASS_TO_PASS successes and failures) and the patch size; the summary adds
the resolved rate and how many patches did not apply. The score (mean outcome) is +1 resolved, -1 not.

``--predictions FILE`` grades SWE-bench predictions with no model: JSONL (one object a line) or a JSON list of
``{"instance_id": ..., "model_patch": "<diff>", "model_name_or_path": ...}``. Each patch is applied to a fresh
checkout of its instance and graded as an episode's would be; ``model_patch`` may be empty or null (nothing
resolved). An id that is not in the instances is an error naming it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from claw_envs.episodes import EpisodeResult, step_infos
from claw_envs.evaluation import Evaluation
from claw_envs.swe.env import SWEEnv
from claw_envs.swe.tasks import normalise
from claw_envs.tasks import TaskSource, json_object


class PatchEvaluation(Evaluation):
    """Resolved rate and per-instance reports (see the module docstring). ``options``: the env's run options
    (``repos``)."""

    score_name = "mean outcome (+1 resolved, -1 not)"
    success_name = "resolved"
    """The env's outcome; the resolved rate is the success rate."""

    def record(self, episode: EpisodeResult) -> dict[str, Any]:
        infos = [info for info in step_infos(episode) if "report" in info]
        if not infos:
            return {"resolved": False, "report": None, "patch_bytes": 0}
        report = infos[-1]["report"]
        return {"resolved": report["resolved"], "report": report, "patch_bytes": len(infos[-1].get("patch", ""))}

    def summary(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        graded = [r for r in records if r.get("report")]
        return {
            "resolved": sum(bool(r.get("resolved")) for r in records),
            "resolved_rate": sum(bool(r.get("resolved")) for r in records) / len(records) if records else 0.0,
            "patch_not_applied": sum(not r["report"]["patch_applied"] for r in graded),
        }

    def rows(self, summary: Mapping[str, Any]) -> list[tuple[str, str]]:
        return [
            ("resolved", f"{summary.get('resolved', 0)} ({summary.get('resolved_rate', 0.0):.1%})"),
            ("patches that did not apply", str(summary.get("patch_not_applied", 0))),
        ]

    def grade_responses(self, path: Path, tasks: TaskSource) -> list[dict[str, Any]]:
        """Grade a predictions file (see the module docstring), one record per prediction."""
        predictions = read_predictions(path)
        by_id = {t.id: t for t in tasks}
        for where, pred in predictions:
            if pred["instance_id"] not in by_id:
                sample = ", ".join(list(by_id)[:3])
                raise ValueError(f"{where}: no instance {pred['instance_id']!r} here (ids look like: {sample}, …)")
        return asyncio.run(self._grade_all(predictions, by_id))

    async def _grade_all(self, predictions: list[tuple[str, dict[str, Any]]], by_id: Mapping[str, Any]) -> list:
        env = SWEEnv(tasks=None, repos=self.options.get("repos"))
        records = []
        try:
            for _, pred in predictions:
                task = by_id[pred["instance_id"]]
                env.instance = normalise(task.data)
                env.prepared = None
                verdict, _ = await env.grade(pred["model_patch"] or "")
                records.append(
                    {
                        "task_id": task.id,
                        "model_name_or_path": pred.get("model_name_or_path"),
                        "outcome": 1.0 if verdict.resolved else -1.0,
                        "success": verdict.resolved,
                        "resolved": verdict.resolved,
                        "report": verdict.to_dict(),
                        "patch_bytes": len(pred["model_patch"] or ""),
                        "status": "ok",
                    }
                )
        finally:
            await env.aclose()
        return records


def read_predictions(path: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """``(where, prediction)`` pairs from a JSONL file or a JSON list; ``ValueError`` names a bad line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ValueError(f"cannot read predictions file {path}: {err.strerror or err}") from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not JSON ({err.msg})") from None
        items = [(f"{path}[{i}]", row) for i, row in enumerate(rows)]
    else:
        lines = enumerate(text.splitlines(), 1)
        items = [(f"{path}:{n}", json_object(line, f"{path}:{n}")) for n, line in lines if line.strip()]
    out = []
    for where, row in items:
        if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str):
            raise ValueError(f"{where}: a prediction needs an 'instance_id' (string)")
        if "model_patch" not in row or not isinstance(row["model_patch"], str | None):
            raise ValueError(f"{where}: a prediction needs a 'model_patch' (a diff, empty or null)")
        out.append((where, row))
    if not out:
        raise ValueError(f"{path}: no predictions")
    return out
