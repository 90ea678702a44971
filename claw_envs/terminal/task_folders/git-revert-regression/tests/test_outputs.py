import subprocess
import sys


def git(*args):
    return subprocess.run(["git", "-C", "/app/calc", *args], capture_output=True, text=True, check=True).stdout


def test_add_works_again():
    out = subprocess.run(
        [sys.executable, "-c", "import calc; print(calc.add(2, 3), calc.mul(2, 3))"],
        cwd="/app/calc",
        capture_output=True,
        text=True,
    )
    assert out.stdout.split() == ["5", "6"]


def test_history_is_kept_and_a_revert_is_on_top():
    subjects = git("log", "--format=%s").splitlines()
    assert len(subjects) == 4 and subjects[0].startswith("Revert") and "speed up add" in subjects[0]
    assert subjects[1:] == ["speed up add", "document the module", "add calculator"]


def test_the_docstring_is_kept():
    assert git("show", "HEAD:calc.py").startswith('"""A small calculator."""')
