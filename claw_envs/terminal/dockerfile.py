"""What the local backend takes from a task's Dockerfile, read by a small parser of its own.

Instructions: continuation lines are joined, comments dropped, BuildKit heredocs (``COPY <<EOT /app/x`` and
``RUN <<EOF``) read with their bodies. ``WORKDIR`` (relative paths resolve against ``/app``, the working directory
of Terminal-Bench's base images, until one is set; the last one is the task's workdir), ``ENV``, ``COPY``/``ADD``
of build-context files into the workdir and ``RUN`` are read; ``FROM``, ``USER``, ``EXPOSE``, ``CMD`` and the rest
are ignored: the local backend runs on this machine's system.

Each ``RUN`` line is split into its commands (at ``&&`` and ``;``) and each command is one of:

* **apt** — ``apt-get install`` packages, checked against this machine (:mod:`.provision`);
* **pip** — ``pip install`` / ``pip3 install`` / ``uv pip install`` requirements (``-r`` files of the build
  context read), installed into the task's virtualenv (:mod:`.venvs`);
* **setup** — run in the sandbox's workdir before the agent starts (joined back with ``&&``);
* **ignored** — housekeeping with no effect on what the task sees (``apt-get update``, ``rm -rf
  /var/lib/apt/lists/*``, ``pip install --upgrade pip``, ``--version`` checks, ``mkdir /tests``);
* **skipped** — image setup the local backend does not do, recorded with why (a PPA, ``update-alternatives``,
  the uv installer, locales, users): the task then runs in an approximate environment;
* **alias** — a link into a system ``bin`` folder (``ln -s /usr/bin/python3 /usr/bin/python``): met by the task's
  environment when this machine has the program it names (:mod:`.provision`);
* **unsupported** — what only an image build can do (downloads, writes outside the workdir, other package
  managers): the task is refused, naming the line and why.

Files ``COPY``'d outside the workdir (``/data``, ``/opt``, ``/var/log``…) are ``shown``: read-only at their container
paths; a ``mkdir`` of such a place (or a folder above it) is met by them. ``/tmp`` destinations are written into the
sandbox's ``/tmp``. System folders (``/usr``, ``/etc``…) and the places the sandbox keeps for itself stay refused.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claw_envs.terminal.shellwords import apt_install, argv, pip_install, pipeline, program, split_commands

DEFAULT_WORKDIR = "/app"
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_URL = re.compile(r"(?:https?|ftp)://\S+")
HOUSEKEEPING = {
    "apt-get": "updates or cleans the package index",
    "rm": "clears a package or build cache",
    "pip": "upgrades pip itself (the task's virtualenv has its own)",
    "version": "checks a tool's version",
    "mkdir": "makes /tests or /logs, which the grader provides",
}
FILE_PROGRAMS = frozenset("mkdir rm rmdir touch chmod cp mv ln install tee".split())  # noqa: SIM905
NETWORK_PROGRAMS = frozenset({"curl", "wget", "git"})
OTHER_INSTALLERS = frozenset("npm yarn pnpm cargo go gem conda mamba micromamba cpan cpanm pipx rustup".split())  # noqa: SIM905
SKIPPED = {
    "add-apt-repository": "adds a package source (PPA); packages come from this machine",
    "apt-key": "adds a package-signing key; packages come from this machine",
    "update-alternatives": "sets the image's default programs; the task's virtualenv decides which python runs",
    "locale-gen": "sets up the image's locales; the sandbox runs C.UTF-8",
    "update-locale": "sets up the image's locales; the sandbox runs C.UTF-8",
    "dpkg-reconfigure": "reconfigures an image package",
    "useradd": "adds a user; the sandbox has one user",
    "adduser": "adds a user; the sandbox has one user",
    "groupadd": "adds a group; the sandbox has one user",
    "usermod": "changes a user; the sandbox has one user",
    "chown": "changes file owners; the sandbox has one user",
    "ldconfig": "refreshes the image's library cache",
    "mandb": "indexes the image's manual pages",
}
_COMPOUND = re.compile(r"^(?:if|then|else|elif|fi|for|while|until|do|done|case|esac)(?=\s|$)")
_KEEP_OUT = ("/tests", "/logs")
_SCRATCH = ("/tmp", "/var/tmp")
BIN_DIRS = ("/usr/local/bin", "/usr/local/sbin", "/usr/bin", "/bin", "/usr/sbin", "/sbin")
NOT_SHOWN = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/dev", "/sys", "/home")
"""Where a file outside the workdir cannot be shown: this machine's own system folders, and home (the sandbox's)."""


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction: its upper-case word, its arguments, and its heredoc bodies."""

    word: str
    args: str
    heredocs: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        """The instruction as written (continuations joined), for messages."""
        return f"{self.word} {self.args}".strip()


def instructions(text: str) -> list[Instruction]:
    """The Dockerfile's instructions (see the module docstring)."""
    out, current = [], ""
    lines = iter(text.splitlines())
    for raw in lines:
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        joined, current = (current + stripped).strip(), ""
        word, _, args = joined.partition(" ")
        bodies = []
        for match in _HEREDOC.finditer(args):
            body = []
            for line in lines:
                if line.strip() == match.group(2):
                    break
                body.append(line)
            bodies.append("\n".join(body) + "\n")
        out.append(Instruction(word.upper(), args.strip(), tuple(bodies)))
    if current.strip():
        word, _, args = current.strip().partition(" ")
        out.append(Instruction(word.upper(), args.strip()))
    return out


def read_dockerfile(
    path: Path, *, context: Path, folder: Path, private: frozenset[str] | set[str] = frozenset()
) -> dict[str, Any]:
    """A task's Dockerfile as task data: ``workdir``, ``copies`` (``[source relative to the task folder, destination
    inside]``), ``inline_files`` (``[destination, text]`` of heredoc ``COPY``), ``env``, ``setup`` (commands), ``apt``,
    ``pip`` and ``pip_options``, ``skipped`` and ``unsupported`` (lines with why). ``context`` is the build context,
    ``folder`` the task folder; ``private`` names context entries ``COPY .`` never copies (tests, solution)."""
    out: dict[str, Any] = {
        "workdir": DEFAULT_WORKDIR,
        "copies": [],
        "inline_files": [],
        "env": {},
        "setup": [],
        "apt": [],
        "pip": [],
        "pip_options": [],
        "skipped": [],
        "unsupported": [],
        "aliases": [],
        "shown": [],
    }
    if not path.is_file():
        return out
    steps: list[tuple[str, Instruction]] = []  # (workdir at the time, RUN)
    workdir = DEFAULT_WORKDIR
    for ins in instructions(path.read_text(encoding="utf-8", errors="replace")):
        if ins.word == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, ins.args.strip("\"'")))
        elif ins.word == "ENV":
            out["env"].update(_env_pairs(ins.args))
        elif ins.word in ("COPY", "ADD"):
            problem = _copy(ins, workdir, context, folder, private, out)
            if problem:
                out["unsupported"].append(f"{ins.line} ({problem})")
        elif ins.word == "RUN":
            steps.append((workdir, ins))
    out["workdir"] = workdir
    _place_copies(out, workdir)
    for at, ins in steps:
        _run(ins, at, workdir, folder, out)
    for dest, _text in out["inline_files"]:
        if not _under(dest, workdir):
            out["unsupported"].append(f"COPY <<heredoc {dest} (the local backend shows only the workdir {workdir})")
    out["inline_files"] = [item for item in out["inline_files"] if _under(item[0], workdir)]
    return out


def _run(ins: Instruction, at: str, workdir: str, folder: Path, out: dict[str, Any]) -> None:
    """Sort one ``RUN`` into ``out`` (see the module docstring)."""
    if ins.heredocs:  # a script: run it as it is
        out["setup"].append(_in_dir(at, workdir, ins.heredocs[0]))
        return
    kept = []
    shown = tuple(dest for _src, dest in out["shown"])
    commands = split_commands(ins.args)
    if any(_COMPOUND.match(c) for c in commands):  # if/for/while…: run as written, once nothing in it is refused
        _compound(ins, commands, (at, workdir, shown), out)
        return
    for command in commands:
        kind, detail = classify(command, at, workdir, shown)
        if kind == "apt":
            out["apt"].extend(name for name in detail if name not in out["apt"])
        elif kind == "pip":
            _pip(command, at, folder, out, ins.line)
        elif kind == "setup":
            kept.append(command)
        elif kind == "skipped":
            out["skipped"].append(f"{command} ({detail})")
        elif kind == "alias":
            out["aliases"].append([*detail, command])
        elif kind == "unsupported":
            out["unsupported"].append(f"{ins.line} ({detail})")
    if kept:
        out["setup"].append(_in_dir(at, workdir, " && ".join(kept)))


def _compound(ins: Instruction, commands: list[str], where: tuple[str, str, tuple[str, ...]], out: dict) -> None:
    """A ``RUN`` with shell compounds (``if … then … fi``): kept whole as setup, unless a command in it is refused
    or installs packages (which cannot be taken out of it)."""
    at, workdir, shown = where
    for command in commands:
        kind, detail = classify(_COMPOUND.sub("", command).strip() or ":", at, workdir, shown)
        if kind == "unsupported":
            out["unsupported"].append(f"{ins.line} ({detail})")
            return
        if kind in ("apt", "pip", "alias"):
            out["unsupported"].append(f"{ins.line} (installs inside a shell if/for/while, which is not taken apart)")
            return
    out["setup"].append(_in_dir(at, workdir, ins.args))


def classify(command: str, at: str, workdir: str, shown: tuple[str, ...] = ()) -> tuple[str, Any]:
    """``(kind, detail)`` of one command of a ``RUN`` line run in ``at``: apt (the packages), pip, setup, ignored,
    skipped, alias (``[link, target]``) or unsupported (why); ``shown`` are the places outside the workdir that
    ``COPY`` fills."""
    parts = pipeline(command)
    words = argv(parts[0])
    prog = program(words)
    if not words or words[0] in ("set", "true", ":"):
        return "ignored", "shell option"
    if (apt := apt_install(words)) is not None:
        return "apt", apt
    if prog in ("apt-get", "apt", "apt-fast", "aptitude"):
        verb = next((w for w in words[1:] if not w.startswith("-")), "")
        if verb in ("update", "upgrade", "dist-upgrade", "clean", "autoclean", "autoremove"):
            return "ignored", HOUSEKEEPING["apt-get"]
        return "skipped", f"apt-get {verb} changes the image's packages"
    if (pip := pip_install(words)) is not None:
        if pip.requirements == ["pip"] and not pip.files:
            return "ignored", HOUSEKEEPING["pip"]
        return "pip", pip
    if prog in ("pip", "pip3") or (prog.startswith("python") and words[1:3] == ["-m", "pip"]):
        return "ignored", "asks pip about the image"
    if words[1:] in (["--version"], ["-V"], ["version"], ["-v"]):
        return "ignored", HOUSEKEEPING["version"]
    if (
        (prog.startswith("python") and words[1:3] == ["-m", "venv"])
        or prog == "virtualenv"
        or words[:2] == ["uv", "venv"]
    ):
        return "skipped", "makes a virtualenv; the task's own virtualenv stands in for it"
    if prog in SKIPPED:
        return "skipped", SKIPPED[prog]
    url = _URL.search(command)
    if prog in ("curl", "wget") and url and len(parts) > 1 and program(argv(parts[-1])) in ("sh", "bash"):
        if "astral.sh/uv" in url.group(0):
            return "skipped", "installs uv; the tests run with pytest from the task's virtualenv"
        return "unsupported", f"downloads and runs an installer from {url.group(0)} (no network here)"
    if prog in NETWORK_PROGRAMS and url:
        return "unsupported", f"downloads {url.group(0)} (no network here)"
    if prog in OTHER_INSTALLERS:
        return "unsupported", f"installs packages with {prog}, which needs the network"
    if prog in ("systemctl", "service"):
        return "unsupported", "starts a system service"
    if prog in FILE_PROGRAMS:
        return _file_command(prog, words, at, workdir, shown)
    return "setup", None


def _file_command(prog: str, words: list[str], at: str, workdir: str, shown: tuple[str, ...]) -> tuple[str, Any]:
    """A command that writes files: setup when it writes only in the workdir or /tmp."""
    args = [w for w in words[1:] if not w.startswith("-")]
    if prog == "ln" and len(args) >= 2 and (alias := _alias(args[0], args[-1])):
        return "alias", alias
    if prog == "chmod":
        args = args[1:]  # the mode
    elif prog in ("cp", "install", "ln"):
        args = args[-1:]  # only the destination is written
    paths = [posixpath.normpath(posixpath.join(at, a)) for a in args]
    outside = [p for p in paths if not _under(p, workdir) and not any(_under(p, s) for s in _SCRATCH)]
    if not outside:
        return "setup", None
    if prog == "mkdir" and shown:  # a folder the Dockerfile's COPY fills (shown read-only) is there already
        outside = [p for p in outside if not any(_under(s, p) for s in shown)]
        if not outside:
            return "ignored", "makes a folder the Dockerfile's COPY fills (shown read-only)"
    if prog == "rm" and all(p.startswith(("/var/lib/apt/lists", "/var/cache", "/root/.cache")) for p in outside):
        return "ignored", HOUSEKEEPING["rm"]
    if prog == "mkdir" and all(any(_under(p, k) for k in _KEEP_OUT) for p in outside):
        return "ignored", HOUSEKEEPING["mkdir"]
    if prog == "ln" and all(p.startswith("/etc/localtime") for p in outside):
        return "skipped", "sets the image's timezone; the sandbox runs UTC"
    if prog == "chmod" and all(any(_under(p, s) for s in shown) for p in outside):
        return "skipped", "sets the mode of a file shown read-only; it keeps the mode it has in the task folder"
    return "unsupported", f"writes {outside[0]} outside the workdir {workdir}"


def _alias(target: str, link: str) -> list[str] | None:
    """``[link path, target]`` when ``ln`` makes a link in a system ``bin`` folder (``None`` otherwise)."""
    if link.rstrip("/") in BIN_DIRS:
        link = posixpath.join(link, posixpath.basename(target))
    if posixpath.dirname(link) not in BIN_DIRS or not posixpath.basename(link):
        return None
    return [link, target]


def _place_copies(out: dict[str, Any], workdir: str) -> None:
    """Keep the copies into the workdir or /tmp; move those elsewhere to ``shown`` (read-only at their paths), or to
    ``unsupported`` where nothing can be shown (see the module docstring)."""
    kept = []
    for src, dest in out["copies"]:
        if _under(dest, workdir) or _under(dest, "/tmp"):
            kept.append([src, dest])
        elif why := _not_shown(dest, workdir):
            out["unsupported"].append(f"COPY {src} {dest} ({why})")
        else:
            out["shown"].append([src, dest])
    out["copies"] = kept
    for dest, _text in out["inline_files"]:
        if not (_under(dest, workdir) or _under(dest, "/tmp")):
            out["unsupported"].append(f"COPY <<heredoc {dest} (the local backend writes only the workdir and /tmp)")
    out["inline_files"] = [item for item in out["inline_files"] if _under(item[0], workdir) or _under(item[0], "/tmp")]
    dests = sorted(dest for _src, dest in out["shown"])
    nested = {d for d in dests if any(d != o and _under(d, o) for o in dests)}
    for src, dest in [c for c in out["shown"] if c[1] in nested]:
        out["unsupported"].append(f"COPY {src} {dest} (inside a folder copied outside the workdir, shown read-only)")
    out["shown"] = [c for c in out["shown"] if c[1] not in nested]


def _not_shown(dest: str, workdir: str) -> str | None:
    """Why a file cannot be shown at ``dest`` outside the workdir, or ``None``."""
    if any(_under(dest, k) for k in (*NOT_SHOWN, *_KEEP_OUT, "/var/tmp")) or _under(workdir, dest):
        return f"{dest}: the local backend cannot place files among this machine's system folders or the sandbox's own"
    return None


def _pip(command: str, at: str, folder: Path, out: dict[str, Any], line: str) -> None:
    pip = pip_install(argv(pipeline(command)[0]))
    assert pip is not None
    if pip.local:
        out["unsupported"].append(f"{line} (installs {pip.local[0]}, a local project, which needs an image build)")
        return
    out["pip"].extend(name for name in pip.requirements if name != "pip" and name not in out["pip"])
    out["pip_options"] += [o for o in pip.options if o not in out["pip_options"]]
    for file in pip.files:
        host = _host_of(posixpath.normpath(posixpath.join(at, file)), [*out["copies"], *out["shown"]], folder)
        if host is None:
            out["unsupported"].append(f"{line} (reads {file}, which is not a file COPY'd from the build context)")
            continue
        for req in host.read_text(encoding="utf-8", errors="replace").splitlines():
            req = req.split("#", 1)[0].strip()
            if req and not req.startswith("-") and req not in out["pip"]:
                out["pip"].append(req)


def _host_of(inside: str, copies: list[list[str]], folder: Path) -> Path | None:
    """The build-context file a ``COPY`` put at ``inside``, or ``None``."""
    for src, dest in copies:
        host = folder / src
        if dest == inside and host.is_file():
            return host
        if _under(inside, dest) and host.is_dir() and (host / posixpath.relpath(inside, dest)).is_file():
            return host / posixpath.relpath(inside, dest)
    return None


def _in_dir(at: str, workdir: str, command: str) -> str:
    """``command`` run where the ``RUN`` line ran: a folder under the workdir is made and entered first."""
    if at == workdir or not _under(at, workdir):
        return command
    rel = shlex.quote(posixpath.relpath(at, workdir))
    return f"mkdir -p {rel} && cd {rel} && {command}"


def _env_pairs(rest: str) -> dict[str, str]:
    words = shlex.split(rest)
    if len(words) >= 2 and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    return dict(word.split("=", 1) for word in words if "=" in word)


def _copy(
    ins: Instruction, workdir: str, context: Path, base: Path, private: frozenset[str] | set[str], out: dict[str, Any]
) -> str | None:
    """Add a ``COPY``'s sources to ``out``; what the local backend cannot honour about it, or ``None``."""
    rest = ins.args
    words = [w for w in (shlex.split(rest) if not rest.startswith("[") else _json_words(rest)) if w]
    flags = [w for w in words if w.startswith("--")]
    words = [w for w in words if not w.startswith("--")]
    if any(f.startswith("--from") for f in flags):
        return "copies from another build stage or image"
    if len(words) < 2:
        return "no source or destination"
    *sources, dest = words
    dest_abs = posixpath.normpath(posixpath.join(workdir, dest))
    if ins.heredocs:
        out["inline_files"].append([dest_abs, ins.heredocs[0]])
        return None
    for source in sources:
        if re.match(r"^[a-z]+://", source):
            return "downloads from the network"
        host = (context / source).resolve()
        if not host.is_relative_to(context.resolve()) or not host.exists():
            return f"{source} is not a file of the build context"
        if host == context.resolve():
            skip = {*private, "Dockerfile", "__pycache__"}
            names = sorted(p.name for p in host.iterdir() if p.name not in skip)
            out["copies"].extend([str((host / n).relative_to(base)), posixpath.join(dest_abs, n)] for n in names)
        elif host.is_dir():  # a folder's contents go to the destination, as Docker copies them
            out["copies"].append([str(host.relative_to(base)), dest_abs])
        elif dest.endswith("/") or dest in (".", "./") or dest_abs == workdir or len(sources) > 1:
            out["copies"].append([str(host.relative_to(base)), posixpath.join(dest_abs, host.name)])
        else:
            out["copies"].append([str(host.relative_to(base)), dest_abs])
    return None


def _json_words(rest: str) -> list[str]:
    try:
        words = json.loads(rest)
    except ValueError:
        return []
    return [str(w) for w in words] if isinstance(words, list) else []


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")
