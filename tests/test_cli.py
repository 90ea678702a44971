"""Every console command answers --help, and starts without loading torch or trl."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent

COMMANDS = [
    ["claw-train"],
    ["claw-eval"],
    ["claw-serve"],
    ["claw-envs"],
    ["claw-envs", "list"],
    ["claw-envs", "demo"],
    ["claw-envs", "judge"],
    ["claw-envs", "check"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_help_works(argv):
    out = subprocess.run([str(BIN / argv[0]), *argv[1:], "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "usage" in out.stdout.lower()


@pytest.mark.parametrize("command", ["claw-train", "claw-eval", "claw-serve", "claw-envs"])
def test_help_piped_into_a_reader_that_stops_early_ends_without_a_traceback(command):
    """``claw-eval --help | head -1``: the reader closes the pipe after one line; the command must not print a
    BrokenPipeError traceback to the terminal."""
    proc = subprocess.Popen([str(BIN / command), "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()  # what head does after its line
    _, stderr = proc.communicate(timeout=120)
    assert b"usage" in first.lower()
    assert b"Traceback" not in stderr and b"BrokenPipe" not in stderr, stderr.decode()[-2000:]


def test_envs_list_does_not_import_torch_or_trl():
    code = (
        "import sys; from claw_train.commands import envs; from typer.testing import CliRunner;"
        "r = CliRunner().invoke(envs.app, ['list']); assert r.exit_code == 0, r.output;"
        "assert 'claw/Echo-v0' in r.output, r.output;"
        "print(sorted(m for m in ('torch', 'trl', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_envs_list_in_a_pipe_is_one_tab_separated_line_per_env():
    out = subprocess.run([str(BIN / "claw-envs"), "list"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [line.split("\t") for line in out.stdout.splitlines()]
    assert {row[0] for row in rows} >= {"claw/Echo-v0", "claw/Terminal-v0", "claw/ToolCall-v0"}
    assert all(len(row) == 6 for row in rows), out.stdout


def test_claw_envs_does_not_import_torch():
    code = "import sys, claw_envs, claw_envs.pool, claw_envs.sandbox; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


MISSPELT = "--trainer: unknown option 'learnin_rate'; did you mean learning_rate?"


@pytest.mark.parametrize(
    ("command", "pair", "says"),
    [
        ("claw-train", ["learning_rate", "fast"], "--trainer learning_rate must be a number, not 'fast'"),
        ("claw-train", ["learnin_rate", "1e-5"], MISSPELT),
        ("claw-train", ["num_train_epochs", "true"], "--trainer num_train_epochs must be a number, not True"),
        ("claw-serve", ["learnin_rate", "1e-5"], MISSPELT),
    ],
)
def test_a_bad_trainer_option_is_said_before_any_model_loads(command, pair, says, tmp_path):
    """``--trainer KEY VALUE`` goes to TRL's GRPOConfig: a misspelt name or a wrong type stops the command at once
    (it used to fail once the run had started, with a TypeError from inside the trainer). Both commands check the
    pairs with the same function: claw-serve is asked once (each start costs ~10 s of imports for TRL's config)."""
    argv = [str(BIN / command), "--env", "echo" if command == "claw-train" else "conversation", "--trainer", *pair]
    (tmp_path / "not-a-model").mkdir()  # a folder that is there, so loading it is what would fail
    argv += ["--output-dir", str(tmp_path / "run"), "--model", str(tmp_path / "not-a-model")]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert says in out.stdout + out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", ["claw-train", "claw-eval", "claw-serve"])
def test_an_env_option_the_env_refuses_is_said_before_any_model_loads(command, tmp_path):
    """``--persona nobody`` used to start the run (model, evaluation) and then fail on every episode."""
    argv = [str(BIN / command), "--env", "conversation", "--persona", "nobody", "--output-dir", str(tmp_path / "run")]
    (tmp_path / "not-a-model").mkdir()  # a folder that is there, so loading it is what would fail
    argv += ["--model", str(tmp_path / "not-a-model")]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    said = " ".join((out.stdout + out.stderr).split())  # rich wraps long lines
    assert "--env conversation: the env refuses these options: unknown persona 'nobody'" in said, said
    assert "Traceback" not in out.stderr and not (tmp_path / "run").exists()


def test_claw_serve_says_a_port_out_of_range_instead_of_a_traceback(tmp_path):
    argv = [str(BIN / "claw-serve"), "--port", "70000", "--output-dir", str(tmp_path / "run")]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--port must be a TCP port, 0 to 65535" in out.stderr, out.stdout + out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["demo", "--env", "swee"], "claw-envs demo: --env: unknown env 'swee'; registered families: "),
        (["judge", "--env", "swee"], "claw-envs judge: --env: unknown env 'swee'; registered families: "),
        (["check", "swee"], "claw-envs check: --env: unknown env 'swee'; registered families: "),
        (["check", "terminal", "--tasks", "/nonexistent"], "claw-envs check: --tasks /nonexistent: no such file or "),
        (["demo", "--bogus"], "claw-envs demo: No such option: --bogus"),
        (["nosuch"], "claw-envs: No such command 'nosuch'."),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_claw_envs_says_what_it_refuses_in_one_line_like_claw_train(argv, says):
    out = subprocess.run([str(BIN / "claw-envs"), *argv], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == "", out.stdout + out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith(says), out.stderr
    if "swee" in argv:
        train = subprocess.run([str(BIN / "claw-train"), "--env", "swee"], capture_output=True, text=True, timeout=120)
        said = " ".join((train.stdout + train.stderr).split())
        assert train.returncode == 2 and out.stderr.split(": ", 1)[1].strip() in said, said
