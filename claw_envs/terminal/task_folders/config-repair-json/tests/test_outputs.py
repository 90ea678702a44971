import json


def load():
    return json.load(open("/app/config/settings.json"))


def test_it_parses_and_the_port_changed():
    assert load()["port"] == 8081


def test_every_other_setting_is_kept():
    data = load()
    assert data["service"] == "billing" and data["debug"] is False and data["timeout_s"] == 30
    assert data["database"] == {"host": "db.internal", "port": 5432, "pool": 10}
    assert data["features"] == ["invoices", "refunds"]
    assert set(data) == {"service", "port", "debug", "database", "features", "timeout_s"}
