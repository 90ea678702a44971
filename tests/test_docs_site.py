"""The documentation site (issue #17): `mkdocs build --strict` passes, every public module has a reference page
showing its public classes and functions, and every public object has a docstring.

"Public" means no leading underscore in the name or in any module or package on its path. Re-exports (names a
package imports from its modules) are checked where they are defined. A method without a docstring of its own
passes when it overrides a documented one (``inspect.getdoc`` inheritance), as the site shows the inherited text.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MKDOCS = Path(sys.executable).parent / "mkdocs"
_hook_spec = importlib.util.spec_from_file_location("api_reference", ROOT / "docs" / "hooks" / "api_reference.py")
api_reference = importlib.util.module_from_spec(_hook_spec)
_hook_spec.loader.exec_module(api_reference)


def module_file(root: Path, module: str) -> Path:
    """The source file of ``module`` under ``root`` (a package's ``__init__.py``)."""
    path = root / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def public_definitions(tree: ast.Module) -> list[tuple[str, ast.AST, list[ast.AST]]]:
    """``(name, node, public methods)`` for each public class and function defined at the top of a module."""
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and not node.name.startswith("_"):
            methods = []
            if isinstance(node, ast.ClassDef):
                methods = [
                    m
                    for m in node.body
                    if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and not m.name.startswith("_")
                ]
            out.append((node.name, node, methods))
    return out


def undocumented(root: Path, packages: tuple[str, ...]) -> set[str]:
    """``module[:qualname]`` of every public module, class, function and method under ``root`` with no docstring."""
    missing = set()
    for module in api_reference.public_modules(root, packages):
        tree = ast.parse(module_file(root, module).read_text())
        if not ast.get_docstring(tree):
            missing.add(module)
        for name, node, methods in public_definitions(tree):
            if not ast.get_docstring(node):
                missing.add(f"{module}:{name}")
            bare = [m.name for m in methods if not ast.get_docstring(m)]
            if bare:
                cls = getattr(importlib.import_module(module), name)
                missing |= {f"{module}:{name}.{m}" for m in bare if not inspect.getdoc(getattr(cls, m, None))}
    return missing


def test_every_public_module_class_and_function_has_a_docstring():
    missing = "\n".join(sorted(undocumented(ROOT, api_reference.PACKAGES)))
    assert not missing, f"public objects without a docstring (the API reference would show them bare):\n{missing}"


def test_a_missing_docstring_is_found(tmp_path, monkeypatch):
    package = tmp_path / "docpkg_sample"
    (package / "_private").mkdir(parents=True)
    (package / "__init__.py").write_text('"""A package."""\n')
    (package / "_private" / "__init__.py").write_text("def hidden(): pass\n")
    (package / "bare.py").write_text("def helper():\n    return 1\n")
    (package / "mod.py").write_text(
        textwrap.dedent('''\
        """A module."""


        class Base:
            """A base."""

            def run(self):
                """Run it."""


        class Child(Base):
            """A child."""

            def run(self):
                return 2

            def stop(self):
                return 3

            def _internal(self):
                return 4


        def _private():
            pass
        ''')
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert undocumented(tmp_path, ("docpkg_sample",)) == {
        "docpkg_sample.bare",
        "docpkg_sample.bare:helper",
        "docpkg_sample.mod:Child.stop",
    }


def _anchors(module: str) -> list[str]:
    """The heading ids mkdocstrings gives ``module``'s documented public classes, functions and methods (a missing
    docstring is the docstring test's finding, not reported twice)."""
    ids = []
    for name, node, methods in public_definitions(ast.parse(module_file(ROOT, module).read_text())):
        if not ast.get_docstring(node):
            continue
        ids.append(f"{module}.{name}")
        ids += [f"{module}.{name}.{m.name}" for m in methods if ast.get_docstring(m)]
    return ids


def _mkdocs(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([str(MKDOCS), *args], cwd=cwd, capture_output=True, text=True, timeout=240, env=env)


@pytest.mark.skipif(not MKDOCS.exists(), reason="mkdocs is in the dev extra: pip install -e '.[dev]'")
def test_the_site_builds_strict_with_a_reference_page_per_public_module(tmp_path):
    site = tmp_path / "site"
    proc = _mkdocs("build", "--strict", "--site-dir", str(site))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    pages = ["quickstart", "adding-an-env", "learning", "reading-a-run", "evaluating", "gpu", "serving", "envs"]
    pages += [f"envs/{family}" for family in ("conversation", "toolcall", "terminal", "swe", "gui")]
    for page in pages:
        assert (site / page / "index.html").is_file(), page
    modules = api_reference.public_modules(ROOT)
    assert {"claw_envs.core", "claw_envs.sandbox.local", "claw_envs.pool", "judges.prm", "claw_train.advantages",
            "claw_train.training.trainer", "claw_train.policy.sglang",
            "claw_train.options.tree"} <= set(modules)  # fmt: skip
    index = (site / "reference" / "index.html").read_text()
    for module in modules:
        html = (site / "reference" / Path(*module.split(".")) / "index.html").read_text()
        assert f'href="{"/".join(module.split("."))}/"' in index, f"{module} is not linked from the reference index"
        absent = [a for a in _anchors(module) if f'id="{a}"' not in html]
        assert not absent, f"the reference page of {module} lacks {absent}"
    leftover = [p for p in (site / "reference").rglob("*.html") if api_reference.ROLE.search(p.read_text())]
    assert not leftover, f"Sphinx roles left as text in {leftover[:3]}"
    registry = (site / "reference" / "claw_envs" / "registry" / "index.html").read_text()
    assert 'href="../spec/#claw_envs.spec.FamilySpec"><code>FamilySpec</code></a>' in registry  # a role, linked
    assert not list(site.rglob("*.py")), "the docs hook was copied into the site"
    assert "fonts.googleapis.com" not in (site / "index.html").read_text()


@pytest.mark.skipif(not MKDOCS.exists(), reason="mkdocs is in the dev extra: pip install -e '.[dev]'")
def test_a_broken_cross_reference_fails_the_strict_build(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Page\n\nSee [the base class][claw_envs.core.NoSuchEnv].\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: {docs}\nhooks: []\nnav:\n  - index.md\n")
    proc = _mkdocs("build", "--strict", "-f", str(config), "--site-dir", str(tmp_path / "site"))
    assert proc.returncode != 0
    assert "Could not find cross-reference target 'claw_envs.core.NoSuchEnv'" in proc.stdout + proc.stderr


def test_sphinx_roles_become_optional_cross_references():
    html = (
        "<p>See :class:<code>~claw_envs.spec.FamilySpec</code>, :meth:<code>RunDir.prepare</code>, "
        ":mod:<code>.workspace</code> and :func:<code>asyncio.run()</code>.</p>"
    )
    out = api_reference.roles_to_links(html, "claw_envs.swe.env", is_package=False)
    assert '<autoref identifier="claw_envs.spec.FamilySpec" optional><code>FamilySpec</code></autoref>' in out
    assert '<autoref identifier="claw_envs.swe.env.RunDir.prepare" optional><code>RunDir.prepare</code>' in out
    assert '<autoref identifier="claw_envs.swe.workspace" optional><code>workspace</code></autoref>' in out
    assert '<autoref identifier="claw_envs.swe.env.asyncio.run" optional><code>asyncio.run()</code>' in out
    assert ":class:" not in out and ":mod:" not in out
    assert api_reference.role_target(".workspace", "claw_envs.swe", is_package=True) == "claw_envs.swe.workspace"
