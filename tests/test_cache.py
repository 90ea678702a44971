"""claw_envs.cache.cached, the one way claw keeps built things on disk (models, task and instance virtualenvs): a
build runs once across processes, a failed or unfinished one leaves nothing that reads as complete, and what it wrote
never moves."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from claw_envs.cache import cached


def nothing_built(root: Path, *, besides: tuple[str, ...] = ()) -> bool:
    """Whether the cache ``root`` holds nothing a failed build left: no key and no build folder (lock files stay, and
    the entries named in ``besides``)."""
    if not root.exists():
        return True
    builds = root / "builds"
    left = [p for p in root.iterdir() if p.name not in ("locks", *besides) and not p.name.endswith(".lock")]
    return all(p == builds for p in left) and not (builds.is_dir() and any(builds.iterdir()))


def _complete(path: Path) -> bool:
    return (path / "done").is_file()


def test_a_key_is_built_once_and_published_where_it_was_built(tmp_path):
    builds = []

    def build(folder: Path) -> None:
        builds.append(folder)
        (folder / "done").write_text("x")

    first = cached(tmp_path, "k", build, complete=_complete)
    again = cached(tmp_path, "k", build, complete=_complete)
    assert first == again == tmp_path / "k" and len(builds) == 1
    assert first.is_symlink() and first.resolve() == builds[0].resolve()  # the build's own folder: it never moves
    assert first.resolve().stat().st_mode & 0o005 == 0o005  # a sandbox's user (not the owner) reads and enters it


def test_a_failed_build_leaves_nothing_that_reads_as_complete(tmp_path):
    def broken(folder: Path) -> None:
        (folder / "half").write_text("x")
        raise OSError("No space left on device")

    with pytest.raises(OSError, match="No space"):
        cached(tmp_path, "k", broken, complete=_complete)
    assert nothing_built(tmp_path)
    with pytest.raises(RuntimeError, match="without its completion marker"):
        cached(tmp_path, "k", lambda folder: None, complete=_complete)
    assert not (tmp_path / "k").exists()


def test_a_stale_build_and_an_old_unfinished_folder_are_replaced(tmp_path):
    (tmp_path / "k").mkdir()  # an older claw's folder, never finished
    (tmp_path / "k" / "junk").write_text("x")
    (tmp_path / "builds").mkdir()
    (tmp_path / "builds" / "k-dead").mkdir()  # a process died while building
    path = cached(tmp_path, "k", lambda folder: (folder / "done").write_text("x"), complete=_complete)
    assert _complete(path) and not (tmp_path / "builds" / "k-dead").exists() and not (path / "junk").exists()
    old = path.resolve()
    (old / "done").unlink()  # what made it usable is gone (a virtualenv's interpreter, say): built again
    path = cached(tmp_path, "k", lambda folder: (folder / "done").write_text("y"), complete=_complete)
    assert (path / "done").read_text() == "y" and not old.exists()


def test_processes_asking_at_once_share_one_build(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from claw_envs.cache import cached

        def build(folder):
            with open({str(tmp_path / "log")!r}, "a") as log:
                log.write("built\\n")
            time.sleep(1.0)
            (folder / "done").write_text("x")

        print(cached(Path({str(tmp_path / "cache")!r}), "k", build, complete=lambda p: (p / "done").is_file()))
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(set(outs)) == 1 and (tmp_path / "log").read_text() == "built\n"
