"""``claw/SWE-v0``: SWE-bench instances — fix an issue in a real repository with bash, graded by hidden tests.

``tasks`` reads SWE-bench rows (4.x and 5.x; JSONL, JSON, parquet, a dataset id) and the built-in ones,
``repos`` finds repositories and keeps their mirrors, ``workspace`` puts a repository at ``/testbed`` in a
sandbox from cached parts, ``actions`` reads a turn, ``signals`` scores a command, ``grading`` grades a patch
(swebench's parsers when installed, ``pytest_log`` otherwise), ``env`` is the environment and ``evaluation``
the ``claw-eval`` extension (``--predictions``).
"""

from claw_envs.spec import FamilySpec, JudgeTemplates, TrainingDefaults
from claw_envs.swe.env import SWEEnv

SPEC = FamilySpec(
    name="swe",
    env_id="claw/SWE-v0",
    entry_point="claw_envs.swe.env:SWEEnv",
    judge=JudgeTemplates(prm="prm_swe", hint="hint_agent"),
    training=TrainingDefaults(
        max_new_tokens=192,
        max_turns=8,
        group_size=4,
        rollout_workers=2,
        bootstrap="none",
        warm_start_steps=24,  # SmolLM2-135M writes no action here on its own (README: action formats)
    ),
    load_tasks="claw_envs.swe.tasks:load_instances",
    evaluation="claw_envs.swe.evaluation:PatchEvaluation",
    env_options=("repos",),
    description="SWE-bench instances: fix an issue in a repository at /testbed, graded by its hidden tests",
)

__all__ = ["SPEC", "SWEEnv"]
