import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, "/app")
from inventory import Item, restock, total_value


def test_the_projects_own_tests_pass():
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd="/app",
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-2000:]


def test_the_tests_were_not_changed():
    text = Path("/app/tests/test_core.py").read_bytes()
    assert hashlib.sha256(text).hexdigest()[:12] == "5d8f7a2eefbc"


def test_total_value_counts_quantities():
    assert total_value([Item("a", 0.1, 3), Item("b", 2.25, 4)]) == 9.3
    assert total_value([]) == 0


def test_restock():
    items = [Item("a", 1.0, 1)]
    assert restock(items, "a", 2).quantity == 3
    with pytest.raises(ValueError):
        restock(items, "a", -5)
    with pytest.raises(KeyError):
        restock(items, "zzz", 1)
