from pathlib import Path


def test_peak_minute():
    assert Path("/app/peak.txt").read_text().strip() == "10:00"


def test_distinct_errors():
    assert Path("/app/distinct_errors.txt").read_text().strip() == "4"
