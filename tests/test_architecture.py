"""The shape issue #11 asks for: one config tree behind every command's --help, no family named outside its own
folder, and no module of claw_envs/, judges/ or claw_train/ over 450 lines."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

import claw_envs
from claw_train import config

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
COMMANDS = {"claw-train": config.TrainArgs, "claw-eval": config.EvalArgs, "claw-serve": config.ServeArgs}
FAMILY_NAMES = ("conversation", "toolcall", "terminal", "echo", "swe", "gui")


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
    source = Path(config.__file__).read_text()
    block = source[source.index(f"class {cls.__name__}") :]
    match = re.search(rf"\n    {name}: [^\n]*\n    \"\"\"(.*?)\"\"\"", block, re.S)
    assert match, f"{cls.__name__}.{name} has no docstring"
    return " ".join(match.group(1).split())


@pytest.mark.parametrize("command", COMMANDS)
def test_every_config_field_is_in_help_with_its_doc(helps, command):
    text = " ".join(helps[command].replace("│", " ").split())
    for name, (section, field) in config.options(COMMANDS[command]).items():
        flag = f"--{name.replace('_', '-')}"
        assert flag in text, f"{command} --help lacks {flag}"
        owner = next(
            (f.default_factory for f in dataclasses.fields(COMMANDS[command]) if f.name == section),
            COMMANDS[command],
        )
        doc = _doc(owner, field.name)
        assert doc[:40] in text, f"{command} --help lacks the doc of {flag}: {doc!r}"


def test_shared_options_have_the_same_names_and_defaults():
    tables = {name: config.options(cls) for name, cls in COMMANDS.items()}
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


def test_no_module_of_the_packages_is_over_450_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for package in ("claw_envs", "judges", "claw_train")
        for p in ROOT.glob(f"{package}/**/*.py")
        if (n := len(p.read_text().splitlines())) > 450
    }
    assert not long, long


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
