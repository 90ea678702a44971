import subprocess


def git(*args):
    return subprocess.run(["git", "-C", "/app/project", *args], capture_output=True, text=True, check=True).stdout


def test_two_commits_with_the_new_message_on_top():
    assert git("log", "--format=%s").splitlines() == ["docs: add license", "initial commit"]


def test_the_commit_holds_both_files():
    assert set(git("show", "--name-only", "--format=", "HEAD").split()) == {"LICENSE", "README.md"}
    assert "More docs." in git("show", "HEAD:README.md")


def test_the_working_tree_is_clean():
    assert git("status", "--porcelain") == ""
