from pathlib import Path


def test_top_three():
    lines = Path("/app/top_clients.txt").read_text().split("\n")
    assert [line.split() for line in lines if line.strip()] == [
        ["9", "10.0.0.7"],
        ["7", "192.168.1.20"],
        ["5", "172.16.4.2"],
    ]


def test_the_log_is_untouched():
    assert len(Path("/app/access.log").read_text().splitlines()) == 27
