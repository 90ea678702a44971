import os
import subprocess
import time
from pathlib import Path


def service(action):
    return subprocess.run(["/app/service.sh", action], capture_output=True, text=True, timeout=10)


def test_start_status_stop():
    assert service("start").returncode == 0
    time.sleep(0.3)
    pid = int(Path("/app/worker.pid").read_text())
    os.kill(pid, 0)  # alive
    status = service("status")
    assert (status.returncode, status.stdout.strip()) == (0, "running")
    assert service("stop").returncode == 0
    time.sleep(0.3)
    assert not os.path.exists("/app/worker.pid")
    status = service("status")
    assert (status.returncode, status.stdout.strip()) == (3, "stopped")
