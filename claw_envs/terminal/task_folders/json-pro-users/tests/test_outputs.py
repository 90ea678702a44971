from pathlib import Path


def test_emails():
    assert Path("/app/pro_emails.txt").read_text().split() == ["ana@example.com", "ava@example.com", "dee@example.com"]


def test_seats():
    assert Path("/app/pro_seats.txt").read_text().strip() == "10"
