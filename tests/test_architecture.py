"""The shape issues #11 and #42 ask for: one config tree behind every command's --help, no family named outside its
own folder, no family package of claw_envs importing another (what families share has rooms of its own), no import
circle between the files of a package, and no module of claw_envs/, judges/ or claw_train/ over 450 lines."""

from __future__ import annotations

import ast
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

import claw_envs
from claw_train.options import tree

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
COMMANDS = {"claw-train": tree.TrainArgs, "claw-eval": tree.EvalArgs, "claw-serve": tree.ServeArgs}
FAMILY_NAMES = ("conversation", "toolcall", "terminal", "echo", "swe", "gui")
CIRCLE_FREE = ("claw_envs", "judges", "claw_train")
"""The packages whose files import each other without a circle (:func:`test_no_import_circle_between_the_files_of`)."""


@pytest.fixture(scope="module")
def helps() -> dict[str, str]:
    """Each command's --help, as a user sees it in a wide pipe (one line per option)."""
    env = {"COLUMNS": "400", "PATH": str(BIN)}
    out = {}
    for name in COMMANDS:
        proc = subprocess.run([str(BIN / name), "--help"], capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 0, proc.stderr
        out[name] = proc.stdout
    return out


def _doc(cls: type, name: str) -> str:
    """The field's docstring as written under it in the config module."""
    source = Path(tree.__file__).read_text()
    block = source[source.index(f"class {cls.__name__}") :]
    match = re.search(rf"\n    {name}: [^\n]*\n    \"\"\"(.*?)\"\"\"", block, re.S)
    assert match, f"{cls.__name__}.{name} has no docstring"
    return " ".join(match.group(1).split())


@pytest.mark.parametrize("command", COMMANDS)
def test_every_config_field_is_in_help_with_its_doc(helps, command):
    text = " ".join(helps[command].replace("│", " ").split())
    for name, (section, field) in tree.options(COMMANDS[command]).items():
        flag = f"--{name.replace('_', '-')}"
        assert flag in text, f"{command} --help lacks {flag}"
        owner = next(
            (f.default_factory for f in dataclasses.fields(COMMANDS[command]) if f.name == section),
            COMMANDS[command],
        )
        doc = _doc(owner, field.name)
        assert doc[:40] in text, f"{command} --help lacks the doc of {flag}: {doc!r}"


def test_shared_options_have_the_same_names_and_defaults():
    tables = {name: tree.options(cls) for name, cls in COMMANDS.items()}
    shared = set.intersection(*(set(t) for t in tables.values()))
    assert {"env", "model", "policy", "output_dir", "seed", "temperature", "max_new_tokens", "tasks"} <= shared
    for name in set().union(*tables.values()):
        fields = [t[name][1] for t in tables.values() if name in t]
        defaults = {repr(f.default if f.default is not dataclasses.MISSING else f.default_factory()) for f in fields}
        assert len(defaults) == 1, f"--{name} has different defaults: {defaults}"
        assert len({f.type for f in fields}) == 1, f"--{name} has different types"
    assert "checkpoint_every" in tables["claw-serve"] and "updates_per_checkpoint" not in tables["claw-serve"]
    assert "eval_n" in tables["claw-eval"] and "n" not in tables["claw-eval"]


def test_no_family_is_named_outside_its_folder():
    """Only code is checked: comments and docstrings may give examples."""
    pattern = re.compile(rf"\b({'|'.join(FAMILY_NAMES)})\b")  # family names are lower case (ToolCall is OpenAI's)
    found = []
    for path in sorted([*ROOT.glob("claw_train/**/*.py"), *ROOT.glob("judges/**/*.py")]):
        for lineno, line in enumerate(_code_lines(path.read_text()), 1):
            if pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not found, "\n".join(found)


def _code_lines(source: str) -> list[str]:
    """The source with comments, docstrings and prose strings (help, messages: any string with a space) blanked,
    line numbers kept. A family named in code is an identifier or a bare name string, which stays."""
    import ast
    import io
    import tokenize

    tree = ast.parse(source)
    blank: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for stmt in body:
                if (
                    isinstance(stmt, ast.Expr)
                    and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)
                ):
                    blank.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col]
        elif tok.type == tokenize.STRING and any(c.isspace() for c in tok.string):
            if tok.start[0] != tok.end[0]:
                blank.update(range(tok.start[0], tok.end[0] + 1))
            else:
                line = lines[tok.start[0] - 1]
                lines[tok.start[0] - 1] = line[: tok.start[1]] + '""' + line[tok.end[1] :]
    return ["" if i + 1 in blank else line for i, line in enumerate(lines)]


def test_claw_trains_root_holds_at_most_12_modules():
    """claw_train is in rooms by role (models, options, runlog, training, samples, pipeline, policy, serve, view,
    evaluation, commands): its root keeps only what belongs to no room."""
    root = sorted(p.name for p in (ROOT / "claw_train").glob("*.py"))
    assert len(root) <= 12, root


def test_no_function_is_over_80_lines():
    long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines"
        for package in ("claw_envs", "judges", "claw_train")
        for path in sorted(ROOT.glob(f"{package}/**/*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > 80
    ]
    assert not long, "\n".join(long)


def test_no_module_of_the_packages_is_over_450_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for package in ("claw_envs", "judges", "claw_train")
        for p in ROOT.glob(f"{package}/**/*.py")
        if (n := len(p.read_text().splitlines())) > 450
    }
    assert not long, long


# -- imports between files: what a file names, wherever it does (top level, in a function, under TYPE_CHECKING) -------


def modules(package: str) -> dict[str, Path]:
    """Every module of ``package`` by its dotted name (a package by its ``__init__``); files in folders that are no
    package (task fixtures shipped as data) are not modules."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if not all((ROOT / Path(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts))):
            continue
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules among ``known`` that module ``name`` (at ``path``) imports anywhere in its code: at the top,
    inside functions, under ``TYPE_CHECKING``. Relative imports are resolved; ``from a import b`` names the module
    ``a.b`` when there is one, else ``a`` (a package's ``__init__`` only when the package itself is named)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return {m for m in found if m in known and m != name}


def import_graph(*packages: str) -> dict[str, set[str]]:
    """Module -> the modules it imports, over the modules of ``packages`` (imports of other code left out)."""
    mods = {name: path for package in packages for name, path in modules(package).items()}
    return {name: imported(name, path, set(mods)) for name, path in mods.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): each is an import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def family_packages() -> set[str]:
    """The built-in family packages of claw_envs: those holding a registered family's env."""
    return {
        ".".join(spec.entry_point.partition(":")[0].split(".")[:2])
        for spec in claw_envs.registry.specs()
        if spec.entry_point.startswith("claw_envs.")
    }


def _family_of(module: str, families: set[str]) -> str | None:
    return next((f for f in families if module == f or module.startswith(f + ".")), None)


@pytest.mark.parametrize("package", CIRCLE_FREE)
def test_no_import_circle_between_the_files_of(package):
    graph = import_graph(package)
    assert sum(map(len, graph.values())) > len(graph) // 2, "the import graph reads few edges: the check is blind"
    found = circles(graph)
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_family_package_imports_another_and_shared_rooms_import_none():
    """A family stands on the shared rooms of claw_envs (core, tasks, sandbox, tool_calls, shell_turns, …), never on
    another family; and no shared room names a family, except the package's ``__init__``, which registers them."""
    families = family_packages()
    assert {"claw_envs.toolcall", "claw_envs.terminal", "claw_envs.swe", "claw_envs.gui"} <= families, families
    graph = import_graph("claw_envs")
    wrong = []
    for module, targets in graph.items():
        own = _family_of(module, families)
        for target in sorted(targets):
            other = _family_of(target, families)
            if other is not None and other != own and module != "claw_envs":
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_the_import_checks_see_what_they_guard():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = import_graph("claw_envs")
    assert "claw_envs.tool_calls.parse" in graph["claw_envs.toolcall.env"]  # absolute, inside a parenthesised list
    assert "claw_envs.core" in graph["claw_envs.spec"]  # under TYPE_CHECKING
    assert "claw_envs.gui.computer_use" in graph["claw_envs.gui.actions"]
    assert "claw_envs" in graph["claw_envs.pool"]  # inside a function
    assert "claw_envs.terminal.task_folders" not in str(graph)  # task data, not modules


def test_every_registered_family_has_a_spec_and_the_same_file_roles():
    for env_id in claw_envs.env_ids():
        spec = claw_envs.family_spec(env_id)
        assert spec.env_id == env_id and claw_envs.resolve_id(spec.name) == env_id
    for name in ("conversation", "toolcall", "terminal", "echo"):
        folder = ROOT / "claw_envs" / name
        assert (folder / "__init__.py").is_file() and (folder / "env.py").is_file()
        assert "SPEC = FamilySpec(" in (folder / "__init__.py").read_text()


def test_an_incomplete_spec_is_a_clear_one_line_error():
    with pytest.raises(claw_envs.SpecError, match=r"FamilySpec.name must be lower case"):
        claw_envs.FamilySpec(name="Upper Case", env_id="claw/Up-v0", entry_point="m:C")
    with pytest.raises(claw_envs.SpecError, match=r"FamilySpec.env_id must look like 'claw/Name-v0'"):
        claw_envs.FamilySpec(name="up", env_id="Up", entry_point="m:C")
    with pytest.raises(claw_envs.SpecError, match=r"FamilySpec.evaluation must be an import string"):
        claw_envs.FamilySpec(name="up", env_id="claw/Up-v0", entry_point="m:C", evaluation="nocolon")
