"""A family from another package, installed only as a dist-info entry point: claw-train and claw-eval run on it
with no edit under claw_train/ or judges/, with and without demonstrations, and its own judge template is used."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

BIN = Path(sys.executable).parent

PLUGIN = '''
"""Parity: reply with an even number of characters (a plugin family for tests)."""
from pathlib import Path

from claw_envs import ClawEnv, Evaluative, FamilySpec, JudgeTemplates, NextState, Opening, Task, TaskList, Transition
from claw_envs import TrainingDefaults, bad_action

WORDS = {"train": ["cat", "river", "lamp", "stone", "cloud", "bread"], "test": ["owl", "maple", "sand"]}


class ParityEnv(ClawEnv):
    default_max_turns = 1

    @classmethod
    def default_tasks(cls, split="train"):
        return TaskList([Task(f"parity-{split}-{i}", split, {"word": w}) for i, w in enumerate(WORDS[split])], split)

    async def _begin(self, task):
        prompt = f"Say something about {task.data['word']} in an even number of characters."
        return Opening(observation=prompt, messages=[{"role": "user", "content": prompt}])

    async def _act(self, action):
        inputs = {"task": self.task.data["word"], "action": action}
        if len(action.strip()) % 2 == 0:
            ns = NextState("Even: good.", evaluative=Evaluative(1.0, ("even",)), outcome=1.0,
                           judge_inputs={**inputs, "result": "Even: good."})
            return Transition("Even: good.", ns, reward=1.0, terminated=True)
        if not action.strip():
            return Transition("Say something.", bad_action("Say something.", "Reply with a few words.", **inputs))
        ns = NextState("Odd.", evaluative=Evaluative(-1.0, ("odd",)), directive="Reply with an even length.",
                       judge_inputs={**inputs, "result": "Odd."})
        return Transition("Odd.", ns)

    def _final_outcome(self):
        return 0.0

    def reference_action(self):
        return "ab"
{demos}

SPEC = FamilySpec(
    name="parity{suffix}",
    env_id="claw/Parity{suffix}-v0",
    entry_point="claw_parity{suffix}:ParityEnv",
    judge=JudgeTemplates(prm=str(Path(__file__).with_name("parity_prm.jinja")), hint="hint_agent"),
    training=TrainingDefaults(max_new_tokens=12, group_size=4, bootstrap="{bootstrap}", bootstrap_steps={steps}),
    description="even-length replies",
)
'''

DEMOS = """
    def demonstrations(self, n, seed=0):
        rows = []
        for i in range(n):
            word = WORDS["train"][i % len(WORDS["train"])]
            prompt = f"Say something about {word} in an even number of characters."
            rows.append({"messages": [{"role": "user", "content": prompt}], "completion": word + ("!" * (i % 3))})
        return rows
"""

TEMPLATE = """{# needs: task, action, result #}
{% block system %}PARITY-PLUGIN-JUDGE: decide whether the reply had an even length.{% endblock %}
{% block user %}Word: {{ task }}
Reply: {{ action }}
Result: {{ result }}
Answer with \\\\boxed{1}, \\\\boxed{0} or \\\\boxed{-1}.{% endblock %}
"""


def _install(root: Path, suffix: str, *, demos: bool) -> None:
    """A package ``claw_parity<suffix>`` with its judge template and a dist-info naming its spec."""
    module = PLUGIN.replace("{demos}", DEMOS if demos else "").replace("{suffix}", suffix)
    module = module.replace("{bootstrap}", "demonstrations" if demos else "none")
    module = module.replace("{steps}", "8" if demos else "None")  # a short bootstrap: the plugin's own setting
    (root / f"claw_parity{suffix}.py").write_text(module)
    (root / "parity_prm.jinja").write_text(TEMPLATE)
    info = root / f"claw_parity{suffix}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: claw-parity{suffix}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[claw_envs]\nparity{suffix} = claw_parity{suffix}:SPEC\n")


def _run(argv: list[str], root: Path, timeout: int = 500) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    env["CLAW_TINY_CACHE"] = str(root / "tiny")  # the plugin's bootstrap is looked at below (the base takes 4 s)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=root)


@pytest.mark.parametrize("demos", [False, True], ids=["no-demonstrations", "demonstrations"])
def test_plugin_family_trains_and_evaluates(tmp_path, demos):
    suffix = "d" if demos else ""
    _install(tmp_path, suffix, demos=demos)
    name = f"parity{suffix}"
    listed = _run([str(BIN / "claw-envs"), "list"], tmp_path)
    assert f"claw/Parity{suffix}-v0" in listed.stdout and name in listed.stdout, listed.stdout + listed.stderr

    out = tmp_path / "run"
    train = _run(
        [str(BIN / "claw-train"), "--env", name, "--updates", "1", "--samples-per-step", "4", "--report-to", "none",
         "--output-dir", str(out), "--no-display"],
        tmp_path,
    )  # fmt: skip
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    assert ("no demonstrations" in train.stdout) is (not demos)
    built = [json.loads(p.read_text())["settings"]["steps"] for p in (tmp_path / "tiny").glob("*/bootstrap.json")]
    assert built == ([8] if demos else [])  # the spec's bootstrap_steps, not the default 500
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "done" and summary["updates"] == 1
    assert json.loads((out / "run.json").read_text())["max_new_tokens"] == 12  # the spec's training default

    ev = _run(
        [str(BIN / "claw-eval"), "--env", name, "--model", str(out / "checkpoints" / "checkpoint-1"),
         "--eval-n", "3", "--eval-k", "2", "--output-dir", str(tmp_path / "eval")],
        tmp_path,
    )  # fmt: skip
    assert ev.returncode == 0, ev.stdout[-3000:] + ev.stderr[-3000:]
    result = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert result["tasks"] == 3 and result["samples"] == 6 and result["k"] == 2
    assert len((tmp_path / "eval" / "episodes.jsonl").read_text().splitlines()) == 6

    judged = _run([str(BIN / "claw-envs"), "judge", "--env", name, "--show-prompt", "--votes", "1"], tmp_path)
    assert judged.returncode == 0, judged.stdout[-3000:] + judged.stderr[-3000:]
    assert "PARITY-PLUGIN-JUDGE" in judged.stdout  # the family's own template, read from its package


@pytest.mark.parametrize("family", ["echo", "terminal"])
def test_claw_eval_works_for_every_built_in_family(tmp_path, family):
    """Families with no evaluation extension get the generic one (mean outcome, success, pass@k)."""
    if family == "terminal" and shutil.which("bwrap") is None:
        pytest.skip("the terminal sandbox needs bubblewrap")
    from claw_train.models.tiny import bootstrap

    model = str(bootstrap(family, steps=2, progress=False))
    out = tmp_path / "eval"
    ev = _run(
        [str(BIN / "claw-eval"), "--env", family, "--model", model, "--eval-n", "2", "--eval-k", "2",
         "--max-new-tokens", "24", "--output-dir", str(out)],
        tmp_path,
    )  # fmt: skip
    assert ev.returncode == 0, ev.stdout[-3000:] + ev.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tasks"] == 2 and summary["samples"] == 4 and 0.0 <= summary["success_rate"] <= 1.0
    assert "mean outcome" in ev.stdout and "pass@2" in ev.stdout
