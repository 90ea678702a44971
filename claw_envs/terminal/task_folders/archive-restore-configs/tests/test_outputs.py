from pathlib import Path

ROOT = Path("/app/restore")


def test_the_conf_files_are_restored_at_their_paths():
    assert (ROOT / "etc/app/main.conf").read_text() == "listen 8080\nworkers 4\n"
    assert (ROOT / "etc/app/conf.d/cache.conf").read_text() == "size 256m\n"
    assert (ROOT / "etc/nginx/site.conf").read_text() == "server_name example.test;\n"


def test_nothing_else_was_extracted():
    files = sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file())
    assert files == ["etc/app/conf.d/cache.conf", "etc/app/main.conf", "etc/nginx/site.conf"]
