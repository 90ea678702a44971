"""Reading task folders' Dockerfiles and scripts, on real lines from Terminal-Bench tasks (no sandbox, no network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from claw_envs.terminal.dockerfile import classify, instructions, read_dockerfile
from claw_envs.terminal.folders import read_folder
from claw_envs.terminal.provision import plan
from claw_envs.terminal.shellwords import apt_install, argv, pip_install, script_commands, split_commands

REAL = Path(__file__).parent / "fixtures" / "real_terminal"
CORE = REAL / "terminal-bench-core" / "tasks"
POLYGLOT = REAL / "aider_polyglot" / "polyglot_python_bowling"


def kind(command: str, at: str = "/app") -> tuple[str, object]:
    return classify(command, at, "/app")


def test_a_tb1_polyglot_dockerfile_apt_ppa_alternatives_pip_upgrade_and_harness_lines():
    data = read_folder(POLYGLOT)
    assert data["apt"] == [
        "tmux", "asciinema", "curl", "software-properties-common", "python3.11", "python3.11-venv", "python3.11-dev",
        "python3-pip",
    ]  # fmt: skip
    assert data["skipped"] == [
        "add-apt-repository ppa:deadsnakes/ppa (adds a package source (PPA); packages come from this machine)",
        "update-alternatives --install /usr/bin/python3 python3 /usr/bin/python3.11 1 (sets the image's default "
        "programs; the task's virtualenv decides which python runs)",
    ]
    # `pip3 install --upgrade pip`, `python3 --version && pip3 --version`, `rm -rf /var/lib/apt/lists/*` and
    # `mkdir -p /tests` change nothing the task sees: neither setup nor refusal
    assert data["pip"] == [] and data["setup"] == [] and data["unsupported"] == []
    assert data["copies"] == [["workspace", "/app"]]  # COPY workspace/ ./ copies the folder's contents
    assert data["env"] == {"TEST_DIR": "/tests", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    assert data["test_pip"] == ["pytest"] and data["test_script"] == "run-tests.sh"
    p = plan(data)
    assert p.apt["python3.11-dev"].startswith("the task's virtualenv") and p.test_requirements == ("pytest",)


def test_pip_lines_become_requirements_and_the_solutions_run_time_installs_are_named():
    dates = read_folder(CORE / "heterogeneous-dates")  # RUN pip install pandas numpy; COPY task-deps/ ./
    assert dates["pip"] == ["pandas", "numpy"] and dates["copies"] == [["task-deps", "/app"]]
    assert dates["solution_pip"] == ["pandas"] and plan(dates).approximations == ()  # already in the environment
    raman = plan(read_folder(CORE / "raman-fitting"))  # the solution runs `pip install scipy numpy`
    assert raman.env_requirements == ("scipy", "numpy")
    assert raman.approximations[0].startswith("the solution installs scipy, numpy at run time")
    csv = read_folder(CORE / "csv-to-parquet")  # run-tests.sh: `uv add pandas pyarrow`; curl in the Dockerfile
    assert csv["test_pip"] == ["pandas", "pyarrow", "pytest"] and csv["apt"] == ["curl"]
    assert csv["copies"] == [["task-deps/data.csv", "/app/data.csv"]]  # COPY task-deps/data.csv ./


def test_tb1_first_release_layout_shares_the_datasets_test_scripts():
    data = read_folder(CORE / "grid-pattern-transform")
    assert data["instruction"].startswith("Transform the 2x2 input grid into a 6x6 output grid")
    assert data["test_script"] == "run-tests.sh"  # its own: `source $TEST_DIR/setup-uv-pytest.sh; uv add numpy`
    assert data["test_helpers"] == ["../../scripts/setup-uv-pytest.sh", "../../scripts/run-uv-pytest.sh"]
    assert data["test_pip"] == ["numpy", "pytest"]
    hello = read_folder(CORE / "hello-world")  # no run-tests.sh: the dataset's default
    assert hello["test_script"] == "../../defaults/run-tests.sh"
    assert hello["instruction"].startswith('Create a file called hello.txt in the current directory. Write "Hello')


def test_heredoc_copies_mkdir_setup_and_scripts_run_from_the_build_context():
    intrusion = read_folder(CORE / "intrusion-detection")  # COPY <<EOT /app/logs/auth.log ... EOT
    files = dict(intrusion["inline_files"])
    assert sorted(files) == ["/app/logs/auth.log", "/app/logs/http.log", "/app/rules/detection_rules.json"]
    assert files["/app/logs/auth.log"].startswith("Apr 10 08:12:33 server sshd[1234]: Accepted publickey")
    assert '"id": "SSH-BRUTE-FORCE"' in files["/app/rules/detection_rules.json"]
    assert intrusion["setup"] == ["mkdir -p /app/logs /app/rules /app/reports"] and intrusion["apt"] == ["jq", "bc"]
    hack = read_folder(CORE / "git-workflow-hack")
    assert hack["setup"] == ["mkdir -p /app/my_website", "bash /app/setup.sh && rm /app/setup.sh"]
    assert hack["apt"] == ["git", "grep", "sed", "curl"]
    perms = read_folder(CORE / "fix-permissions")  # COPY process_data.sh . ; RUN chmod -x process_data.sh
    assert perms["copies"] == [["process_data.sh", "/app/process_data.sh"]]
    assert perms["setup"] == ["chmod -x process_data.sh"]
    elf = read_folder(CORE / "extract-elf")
    assert elf["setup"] == ["gcc /app/hi.c -o /app/a.out"] and elf["apt"] == ["nodejs", "npm", "gcc"]


@pytest.mark.parametrize(
    ("command", "expected"),
    [  # real RUN commands of Terminal-Bench tasks
        ('curl -L "https://golang.org/dl/go1.21.5.linux-$GOARCH.tar.gz" -o go.tar.gz', "unsupported"),
        ("curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y", "unsupported"),
        ("curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh", "skipped"),
        ("git clone https://github.com/openwall/john.git", "unsupported"),
        ("rm -rf /usr/local/lib/python3.13/site-packages/pip", "unsupported"),
        ("mv rencrypt.py /usr/local/bin/rencrypt", "unsupported"),
        ("mkdir -p /data/output", "unsupported"),
        ("mkdir -p /tests", "ignored"),
        ("rm -rf /var/lib/apt/lists/*", "ignored"),
        ("apt-get clean && apt-get update -y", "ignored"),
        ("pip3 install --no-cache-dir --upgrade pip", "ignored"),
        ("rustc --version", "ignored"),
        ("python3 -m venv /opt/venv", "skipped"),
        ("DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends tzdata=2024a-1", "apt"),
        ("pip3 install pillow --break-system-packages", "pip"),
        ("/opt/venv/bin/pip install requests pytest", "pip"),
        ("npm install -g typescript", "unsupported"),
        ("bash /app/setup.sh", "setup"),
        ("python3 make.py", "setup"),
        ("chmod 311 collect_data.sh", "setup"),
        ("ln -fs /usr/share/zoneinfo/Etc/UTC /etc/localtime", "skipped"),
    ],
)
def test_each_command_of_a_run_line_is_sorted(command, expected):
    assert kind(command)[0] == expected, kind(command)


def test_refusal_reasons_name_the_download_or_the_path():
    assert kind("curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y")[1] == (
        "downloads and runs an installer from https://sh.rustup.rs (no network here)"
    )
    assert kind("git clone https://github.com/openwall/john.git")[1] == (
        "downloads https://github.com/openwall/john.git (no network here)"
    )
    assert (
        kind("mv rencrypt.py /usr/local/bin/rencrypt")[1] == "writes /usr/local/bin/rencrypt outside the workdir /app"
    )


def test_pip_and_apt_words():
    pins = argv('pip install "pandas==1.3.0" "numpy==1.21.0" "pyarrow==6.0.0" "pytest>=7.0.0" "packaging>=21.0"')
    assert pip_install(pins).requirements == ["pandas==1.3.0", "numpy==1.21.0", "pyarrow==6.0.0", "pytest>=7.0.0",
                                              "packaging>=21.0"]  # fmt: skip
    torch = pip_install(argv("pip install torch==2.7.0 --index-url https://download.pytorch.org/whl/cpu"))
    assert torch.requirements == ["torch==2.7.0"] and torch.options == [
        "--index-url",
        "https://download.pytorch.org/whl/cpu",
    ]
    assert pip_install(argv("uv pip install pytest==8.4.1 mailman==3.3.8 pytest-json-ctrf==0.3.5")).requirements == [
        "pytest==8.4.1", "mailman==3.3.8", "pytest-json-ctrf==0.3.5",
    ]  # fmt: skip
    uvx = argv("uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --ctrf /logs/verifier/ctrf.json")
    assert pip_install(uvx).requirements == ["pytest==8.4.1", "pytest-json-ctrf==0.3.5"]
    assert pip_install(argv("uv add gitpython")).requirements == ["gitpython"]
    assert pip_install(argv("python -m pip install -e .[test] --verbose")).local == ["-e .[test]"]
    assert pip_install(argv("pip3 install --no-cache-dir pytest 2>/dev/null")).requirements == ["pytest"]
    assert pip_install(argv("pip list")) is None and pip_install(argv("python3 script.py")) is None
    assert apt_install(argv("apt install -y gcc rustc")) == ["gcc", "rustc"]
    assert apt_install(argv("sudo apt-get -o Acquire::Retries=3 install -y libssl-dev:amd64 jq=1.6-2")) == [
        "libssl-dev",
        "jq",
    ]
    assert apt_install(argv("apt-get update")) is None


def test_shell_text_is_split_where_the_shell_would():
    assert split_commands("cd a && echo 'x && y; z' && echo \"$(ls; pwd)\"; true") == [
        "cd a", "echo 'x && y; z'", 'echo "$(ls; pwd)"', "true",
    ]  # fmt: skip
    script = "apt-get update\ncat > f.py << 'EOF'\npip install evil\nEOF\npip install \\\n  numpy\n# pip install x\n"
    assert script_commands(script) == ["apt-get update", "cat > f.py", "pip install numpy"]


def test_dockerfile_instructions_copy_sources_and_requirement_files(tmp_path):
    ctx = tmp_path / "environment"
    (ctx / "app").mkdir(parents=True)
    (ctx / "requirements.txt").write_text("requests==2.32.3  # pinned\n\n-e .\nflask\n")
    (ctx / "app" / "main.py").write_text("print('hi')\n")
    dockerfile = ctx / "Dockerfile"
    dockerfile.write_text(
        "FROM python:3.11-slim\n# a comment\nWORKDIR /app\nCOPY requirements.txt .\nCOPY app/ ./src/\n"
        "RUN pip install --no-cache-dir -r requirements.txt \\\n    && mkdir -p out\n"
        'ENV PATH="/opt/tools/bin:$PATH" MODE=test\nRUN <<EOF\necho from a heredoc > note.txt\nEOF\n'
        "COPY --from=builder /x /app/x\n"
    )
    assert [i.word for i in instructions(dockerfile.read_text())] == [
        "FROM", "WORKDIR", "COPY", "COPY", "RUN", "ENV", "RUN", "COPY",
    ]  # fmt: skip
    data = read_dockerfile(dockerfile, context=ctx, folder=tmp_path)
    assert data["workdir"] == "/app"
    assert data["copies"] == [
        ["environment/requirements.txt", "/app/requirements.txt"],
        ["environment/app", "/app/src"],
    ]
    assert data["pip"] == ["requests==2.32.3", "flask"]  # read from the COPY'd file; `-e .` is not a requirement
    assert data["setup"] == ["mkdir -p out", "echo from a heredoc > note.txt\n"]
    assert data["env"] == {"PATH": "/opt/tools/bin:$PATH", "MODE": "test"}
    assert data["unsupported"][0].startswith("COPY --from=builder /x /app/x (copies from another build stage")


def test_links_into_a_system_bin_folder_are_aliases_others_are_writes():
    assert kind("ln -s /usr/bin/python3 /usr/bin/python") == ("alias", ["/usr/bin/python", "/usr/bin/python3"])
    assert kind("ln -sf /usr/bin/clang-14 /usr/local/bin/") == (
        "alias",
        ["/usr/local/bin/clang-14", "/usr/bin/clang-14"],
    )
    assert kind("ln -s /opt/x/conf /etc/x.conf") == ("unsupported", "writes /etc/x.conf outside the workdir /app")
    assert kind("ln -s data latest") == ("setup", None)  # inside the workdir


def test_copies_outside_the_workdir_are_shown_read_only_or_refused_in_system_folders(tmp_path):
    ctx = tmp_path / "environment"
    (ctx / "data").mkdir(parents=True)
    for name in ("a.csv", "b.conf", "c.sh", "d.txt"):
        (ctx / "data" / name).write_text("x\n")
    dockerfile = ctx / "Dockerfile"
    dockerfile.write_text(
        "FROM ubuntu:24.04\nRUN mkdir -p /data /solution\nCOPY data/a.csv /data/a.csv\nCOPY data/b.conf /etc/b.conf\n"
        "COPY data/c.sh /tmp/c.sh\nCOPY data/d.txt /opt/tool/d.txt\nRUN chmod +x /opt/tool/d.txt\nWORKDIR /workspace\n"
    )
    data = read_dockerfile(dockerfile, context=ctx, folder=tmp_path)
    assert data["shown"] == [["environment/data/a.csv", "/data/a.csv"], ["environment/data/d.txt", "/opt/tool/d.txt"]]
    assert data["copies"] == [["environment/data/c.sh", "/tmp/c.sh"]]  # written into the sandbox's /tmp
    assert data["unsupported"] == [
        "COPY environment/data/b.conf /etc/b.conf (/etc/b.conf: the local backend cannot place files among this "
        "machine's system folders or the sandbox's own)",
        "RUN mkdir -p /data /solution (writes /solution outside the workdir /workspace)",  # /data alone is met
    ]
    assert data["skipped"][0].startswith("chmod +x /opt/tool/d.txt (sets the mode of a file shown read-only")


def test_a_run_line_with_shell_compounds_runs_as_written_unless_something_in_it_is_refused():
    line = "if [ -d /tmp/a ]; then mkdir -p /app/x && cp -r /tmp/a/. /app/x/; fi && python make.py"
    data = {"setup": [], "unsupported": [], "apt": [], "pip": [], "pip_options": [], "copies": [], "shown": []}
    dockerfile_run(f"RUN {line}", data)
    assert data["setup"] == [line] and not data["unsupported"]  # not broken into `if … && then …`
    dockerfile_run("RUN for p in a b; do apt-get install -y $p; done", data)
    assert data["unsupported"][-1].endswith("(installs inside a shell if/for/while, which is not taken apart)")
    dockerfile_run("RUN if true; then curl -o x https://example.com/x; fi", data)
    assert data["unsupported"][-1].endswith("(downloads https://example.com/x (no network here))")


def dockerfile_run(text: str, out: dict) -> None:
    from claw_envs.terminal.dockerfile import _run

    (ins,) = instructions(text)
    out.setdefault("skipped", [])
    out.setdefault("aliases", [])
    _run(ins, "/app", "/app", Path("."), out)
