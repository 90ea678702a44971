import json
from pathlib import Path


def test_revenue_per_region():
    data = json.loads(Path("/app/revenue.json").read_text())
    assert set(data) == {"south", "east", "north"}
    for region, total in {"east": 239.45, "north": 173.07, "south": 44.99}.items():
        assert abs(data[region] - total) < 0.005, region
