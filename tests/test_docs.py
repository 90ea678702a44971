"""The env written in docs/adding-an-env.md works as the page says."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import gymnasium as gym
from gymnasium.utils.env_checker import check_env

import claw_envs

DOC = Path(__file__).resolve().parents[1] / "docs" / "adding-an-env.md"


def test_adding_an_env_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    source = next(b for b in blocks if "class UpperEnv" in b)
    namespace: dict = {}
    exec(compile(source, str(DOC), "exec"), namespace)
    cls = namespace["UpperEnv"]
    cls.__module__ = "tests_docs_upper"
    module = types.ModuleType("tests_docs_upper")
    module.UpperEnv = cls
    sys.modules["tests_docs_upper"] = module
    spec_source = next(b for b in blocks if "FamilySpec(" in b)
    exec(compile(spec_source.replace("my_pkg.upper", "tests_docs_upper"), str(DOC), "exec"), namespace)
    claw_envs.register(namespace["SPEC"])
    try:
        env = gym.make("claw/Upper-v0").unwrapped
        check_env(env, skip_render_check=True)
        env.reset(seed=0)
        _, _, _, _, info = env.step("nope")
        assert info["next_state"].evaluative.score == -1.0 and "Send exactly" in info["next_state"].directive
        _, reward, terminated, _, info = env.step(env.task.data["word"].upper())
        assert (reward, terminated, info["next_state"].outcome) == (1.0, True, 1.0)
    finally:
        claw_envs.registry.unregister("claw/Upper-v0")
        sys.modules.pop("tests_docs_upper", None)
