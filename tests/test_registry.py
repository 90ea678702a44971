"""Registration: namespace rules and third-party plugins through the ``claw_envs`` entry-point group."""

from __future__ import annotations

import sys
import warnings

import gymnasium as gym
import pytest

from claw_envs import FamilySpec, registry


def _write_plugin(root, dist: str, module: str, body: str, target: str) -> None:
    (root / f"{module}.py").write_text(body)
    info = root / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[claw_envs]\n{dist} = {target}\n")


PLUGIN = """
from claw_envs.echo.env import EchoEnv

class ParrotEnv(EchoEnv):
    '''An echo that a plugin package ships.'''
"""


def test_plugin_env_class_is_registered_and_broken_plugin_only_warns(tmp_path, monkeypatch):
    _write_plugin(tmp_path, "claw_parrot", "claw_parrot_mod", PLUGIN, "claw_parrot_mod:ParrotEnv")
    _write_plugin(tmp_path, "claw_broken", "claw_broken_mod", "raise ImportError('boom')\n", "claw_broken_mod:X")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loaded = registry.load_plugins()
        assert "claw_parrot" in loaded and "claw_broken" not in loaded
        assert any("claw_broken" in str(w.message) and "boom" in str(w.message) for w in caught)
        env = gym.make("claw/Parrot-v0").unwrapped
        assert type(env).__name__ == "ParrotEnv"
        assert "claw/Parrot-v0" in registry.env_ids()
        assert registry.family_spec("claw_parrot").env_id == "claw/Parrot-v0"  # the entry point's name is the family
    finally:
        registry.unregister("claw/Parrot-v0")
        for name in ("claw_parrot_mod", "claw_broken_mod"):
            sys.modules.pop(name, None)


def test_ids_must_use_the_claw_namespace():
    with pytest.raises(ValueError, match="claw/Name-v0"):
        FamilySpec(name="echo9", env_id="Echo-v9", entry_point="claw_envs.echo.env:EchoEnv")
    with pytest.raises(ValueError, match="taken by claw/Echo-v0"):
        registry.register(FamilySpec(name="echo", env_id="claw/Echo-v9", entry_point="claw_envs.echo.env:EchoEnv"))


def test_env_class_unknown_id_lists_known():
    with pytest.raises(KeyError, match=r"registered families: .*echo"):
        registry.env_class("claw/Nope-v0")
