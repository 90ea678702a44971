import subprocess
import time


def run(*args):
    start = time.monotonic()
    done = subprocess.run(["/app/run_limited.sh", *args], capture_output=True, text=True, timeout=20)
    return done, time.monotonic() - start


def test_a_quick_command_keeps_its_status_and_output():
    done, _ = run("sh", "-c", "echo hi; exit 3")
    assert done.returncode == 3 and done.stdout == "hi\n"
    assert run("true")[0].returncode == 0


def test_a_slow_command_is_stopped_after_two_seconds():
    done, took = run("sleep", "30")
    assert done.returncode == 124 and "timed out" in done.stderr and took < 6
