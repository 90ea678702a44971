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


def test_registration_hands_the_env_class_its_task_loader(tmp_path, monkeypatch):
    """``register`` gives the spec's env class its ``load_tasks`` (imported on first use), subclasses inherit it, and
    ``unregister`` takes it back; a class whose family declares none refuses a task file."""
    module = tmp_path / "claw_loader_mod.py"
    module.write_text(
        "from claw_envs.echo.env import EchoEnv\n"
        "from claw_envs.tasks import Task, TaskList\n\n"
        "class LoaderEnv(EchoEnv):\n    pass\n\n"
        "class Child(LoaderEnv):\n    pass\n\n"
        "def load(source, split='train'):\n"
        "    return TaskList([Task(f'{source}-0', split, {'phrase': 'hi'})], split)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import claw_loader_mod as mod

    spec = FamilySpec(
        name="loader", env_id="claw/Loader-v0", entry_point="claw_loader_mod:LoaderEnv",
        load_tasks="claw_loader_mod:load",
    )  # fmt: skip
    try:
        registry.register(spec)
        assert [t.id for t in mod.Child(tasks="src").tasks] == ["src-0"]  # inherited from LoaderEnv
        assert [t.id for t in gym.make("claw/Loader-v0", tasks="file").unwrapped.tasks] == ["file-0"]
        registry.unregister("claw/Loader-v0")
        assert "task_loader" not in vars(mod.LoaderEnv)
        assert mod.LoaderEnv.task_loader is mod.EchoEnv.task_loader  # the echo family's own loader again
    finally:
        registry.unregister("claw/Loader-v0")
        sys.modules.pop("claw_loader_mod", None)
