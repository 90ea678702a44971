"""Terminal tasks: an instruction, files to start from, and a shell check that says whether it is done.

A task's ``data`` has these fields (the same in built-in tasks and JSONL files):

* ``instruction`` (str, required): what the agent is asked to do, in the working directory.
* ``check`` (str, required): a shell command run in the working directory at the end; exit 0 = solved.
* ``files`` (object, optional): path (relative to the working directory) → text content, written first.
* ``setup`` (str, optional): a shell command run after the files are written (``chmod``, ``tar``, …).
* ``solution`` (list of str, optional): commands that solve the task, one per turn (scripted agents,
  demonstrations).

A JSONL row may also carry ``id``; without one the id is ``<file stem>-<row index>``. Built-in tasks are
split into train and test by a hash of their id, so a task never moves between splits.

A **task folder** (Harbor or Terminal-Bench 1 layout, read by :mod:`.folders`) is graded by its hidden tests
instead of a ``check``; its id is the folder's name. ``load_tasks`` takes a JSONL file, one task folder, or a
folder of task folders and datasets of them (ids ``<dataset>/<task>``); some built-in tasks ship as Harbor folders
in ``task_folders/``.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from claw_envs.tasks import Task, TaskList, load_jsonl
from claw_envs.terminal.folders import HalfTask, is_task_folder, read_folder

REQUIRED = {"instruction": str, "check": str}
OPTIONAL = {"files": dict, "setup": str, "solution": list}
FOLDER_REQUIRED = {"instruction": str, "folder": str, "workdir": str, "test_script": str}
TEST_SHARE = 4  # about one built-in task in four is held out
BUILTIN_FOLDERS = Path(__file__).parent / "task_folders"

_LOG = (
    "2026-03-01 10:00:01 INFO server started\n"
    "2026-03-01 10:00:07 ERROR cannot open /data/cache.db\n"
    "2026-03-01 10:01:12 INFO request /index.html 200\n"
    "2026-03-01 10:02:45 WARN slow request /search 1450ms\n"
    "2026-03-01 10:03:02 ERROR timeout talking to db after 30s\n"
    "2026-03-01 10:03:09 INFO request /about.html 200\n"
    "2026-03-01 10:04:55 ERROR disk quota exceeded\n"
)

BUILTIN: dict[str, dict[str, Any]] = {
    "greeting-file": {
        "instruction": "Create a file named greeting.txt whose only line is: hello, world",
        "check": '[ "$(cat greeting.txt)" = "hello, world" ]',
        "solution": ["echo 'hello, world' > greeting.txt"],
    },
    "project-dirs": {
        "instruction": "Create the directories project/src, project/tests and project/docs.",
        "check": "test -d project/src && test -d project/tests && test -d project/docs",
        "solution": ["mkdir -p project/src project/tests project/docs"],
    },
    "count-lines": {
        "instruction": "Count the lines of notes.txt and write just that number into count.txt.",
        "files": {"notes.txt": "buy milk\ncall Ana\nfix the bike\nwater plants\nread chapter 4\npay rent\nsleep\n"},
        "check": '[ "$(tr -d " \\n" < count.txt)" = 7 ]',
        "solution": ["wc -l notes.txt", "wc -l < notes.txt > count.txt"],
    },
    "grep-errors": {
        "instruction": "Copy every ERROR line of app.log, in order and unchanged, into errors.log.",
        "files": {"app.log": _LOG},
        "check": "[ $(wc -l < errors.log) = 3 ] && [ $(grep -c ERROR errors.log) = 3 ]"
        " && head -1 errors.log | grep -q cache.db",
        "solution": ["grep -c ERROR app.log", "grep ERROR app.log > errors.log"],
    },
    "count-info": {
        "instruction": "How many lines of app.log are INFO lines? Write the number into info_count.txt.",
        "files": {"app.log": _LOG},
        "check": '[ "$(tr -d " \\n" < info_count.txt)" = 3 ]',
        "solution": ["grep -c ' INFO ' app.log > info_count.txt"],
    },
    "sort-unique": {
        "instruction": "names.txt has repeated names. Write each name once, sorted alphabetically, into unique.txt.",
        "files": {"names.txt": "mia\nleo\nava\nmia\nben\nleo\nzoe\nava\n"},
        "check": 'printf "ava\\nben\\nleo\\nmia\\nzoe\\n" | diff - unique.txt',
        "solution": ["sort -u names.txt > unique.txt"],
    },
    "sed-config": {
        "instruction": "In config.ini, change the line 'debug = true' to 'debug = false' and keep every other line.",
        "files": {"config.ini": "[server]\nport = 8080\ndebug = true\nworkers = 4\n"},
        "check": "grep -qx 'debug = false' config.ini && ! grep -q 'debug = true' config.ini"
        " && grep -qx 'port = 8080' config.ini && grep -qx 'workers = 4' config.ini",
        "solution": ["cat config.ini", "sed -i 's/^debug = true$/debug = false/' config.ini"],
    },
    "awk-sum": {
        "instruction": "sales.csv has a header and the columns item,qty,price. Write the total qty into total.txt.",
        "files": {"sales.csv": "item,qty,price\npen,12,1.50\nbook,3,9.99\nbag,5,24.00\nink,20,3.25\n"},
        "check": '[ "$(tr -d " \\n" < total.txt)" = 40 ]',
        "solution": ["head -3 sales.csv", "awk -F, 'NR > 1 {s += $2} END {print s}' sales.csv > total.txt"],
    },
    "bash-users": {
        "instruction": "users.txt lists name:uid:shell. Write the names whose shell is /bin/bash, one a line, "
        "in file order, into bash_users.txt.",
        "files": {
            "users.txt": "root:0:/bin/bash\ndaemon:1:/usr/sbin/nologin\nana:1000:/bin/bash\n"
            "bob:1001:/bin/sh\ncarl:1002:/bin/bash\n"
        },
        "check": 'printf "root\\nana\\ncarl\\n" | diff - bash_users.txt',
        "solution": ["awk -F: '$3 == \"/bin/bash\" {print $1}' users.txt > bash_users.txt"],
    },
    "count-python": {
        "instruction": "How many .py files are there anywhere under src/? Write the number into py_count.txt.",
        "files": {
            "src/main.py": "print('hi')\n",
            "src/util/io.py": "\n",
            "src/util/notes.txt": "todo\n",
            "src/tests/test_io.py": "\n",
            "src/README.md": "# src\n",
        },
        "check": '[ "$(tr -d " \\n" < py_count.txt)" = 3 ]',
        "solution": ["find src -name '*.py'", "find src -name '*.py' | wc -l > py_count.txt"],
    },
    "rename-jpeg": {
        "instruction": "Rename every .jpeg file in photos/ to the same name ending in .jpg instead.",
        "files": {"photos/beach.jpeg": "b\n", "photos/cat.jpeg": "c\n", "photos/map.png": "m\n"},
        "check": "test -f photos/beach.jpg && test -f photos/cat.jpg && test -f photos/map.png"
        " && [ -z \"$(find photos -name '*.jpeg')\" ]",
        "solution": ["ls photos", 'for f in photos/*.jpeg; do mv "$f" "${f%.jpeg}.jpg"; done'],
    },
    "make-executable": {
        "instruction": "The script hello.sh cannot be run as ./hello.sh. Make it executable.",
        "files": {"hello.sh": "#!/bin/bash\necho hi\n"},
        "check": 'test -x hello.sh && [ "$(./hello.sh)" = hi ]',
        "solution": ["chmod +x hello.sh"],
    },
    "private-file": {
        "instruction": "Set the permissions of secrets.txt so only its owner can read and write it (mode 600).",
        "files": {"secrets.txt": "api_key=not-a-real-key\n"},
        "setup": "chmod 644 secrets.txt",
        "check": '[ "$(stat -c %a secrets.txt)" = 600 ]',
        "solution": ["chmod 600 secrets.txt"],
    },
    "make-tarball": {
        "instruction": "Pack the directory data/ (with its path) into a gzip-compressed tarball named backup.tar.gz.",
        "files": {"data/a.txt": "alpha\n", "data/b.txt": "beta\n", "data/sub/c.txt": "gamma\n"},
        "check": "for f in a b sub/c; do tar tzf backup.tar.gz | grep -qx data/$f.txt || exit 1; done",
        "solution": ["tar czf backup.tar.gz data"],
    },
    "extract-tarball": {
        "instruction": "Extract bundle.tar into a new directory named restored/.",
        "files": {"src/readme.txt": "read me first\n", "src/lib/code.sh": "echo code\n"},
        "setup": "tar cf bundle.tar -C src . && rm -rf src",
        "check": '[ "$(cat restored/readme.txt)" = "read me first" ] && test -f restored/lib/code.sh',
        "solution": ["tar tf bundle.tar", "mkdir -p restored && tar xf bundle.tar -C restored"],
    },
    "fix-loop-script": {
        "instruction": "sum.sh should print the sum of 1..5 but fails. Fix it so that `bash sum.sh` prints 15.",
        "files": {"sum.sh": "#!/bin/bash\ntotal=0\nfor i in 1 2 3 4 5; do\n  total=$((total + i))\ndne\necho $total\n"},
        "check": '[ "$(bash sum.sh)" = 15 ]',
        "solution": ["cat sum.sh", "sed -i 's/^dne$/done/' sum.sh", "bash sum.sh"],
    },
    "fix-quote-script": {
        "instruction": "greet.sh should print 'Hello, <name>!' for its first argument but it fails. Fix it so "
        "that `bash greet.sh Ana` prints: Hello, Ana!",
        "files": {"greet.sh": '#!/bin/bash\nname=$1\necho "Hello, $name!\n'},
        "check": '[ "$(bash greet.sh Ana)" = "Hello, Ana!" ]',
        "solution": ["cat greet.sh", 'sed -i \'s/^echo "Hello, $name!$/echo "Hello, $name!"/\' greet.sh'],
    },
    "top-word": {
        "instruction": "Write the word that occurs most often in words.txt into top.txt.",
        "files": {"words.txt": "red blue red green\nblue red yellow\nred green\n"},
        "check": '[ "$(tr -d " \\n" < top.txt)" = red ]',
        "solution": ["tr -s ' ' '\\n' < words.txt | sort | uniq -c | sort -rn | head -1 | awk '{print $2}' > top.txt"],
    },
    "middle-lines": {
        "instruction": "Write lines 3 to 5 of data.txt (inclusive) into middle.txt.",
        "files": {"data.txt": "one\ntwo\nthree\nfour\nfive\nsix\nseven\n"},
        "check": 'printf "three\\nfour\\nfive\\n" | diff - middle.txt',
        "solution": ["sed -n 3,5p data.txt > middle.txt"],
    },
    "square-script": {
        "instruction": "Write an executable script square.sh that prints the square of its first argument "
        "(./square.sh 7 prints 49).",
        "check": 'test -x square.sh && [ "$(./square.sh 7)" = 49 ] && [ "$(./square.sh 12)" = 144 ]',
        "solution": [
            "printf '#!/bin/bash\\necho $(( $1 * $1 ))\\n' > square.sh && chmod +x square.sh",
            "./square.sh 7",
        ],
    },
    "latest-link": {
        "instruction": "Create a symbolic link named latest that points to releases/v2.",
        "files": {"releases/v1/app.txt": "v1\n", "releases/v2/app.txt": "v2\n"},
        "check": '[ "$(readlink latest)" = releases/v2 ] && [ "$(cat latest/app.txt)" = v2 ]',
        "solution": ["ln -s releases/v2 latest"],
    },
    "clean-tmp": {
        "instruction": "Delete every .tmp file under cache/ (in any subdirectory) and keep all other files.",
        "files": {
            "cache/a.tmp": "x\n",
            "cache/keep.txt": "k\n",
            "cache/deep/b.tmp": "y\n",
            "cache/deep/data.bin": "d\n",
        },
        "check": "[ -z \"$(find cache -name '*.tmp')\" ] && test -f cache/keep.txt && test -f cache/deep/data.bin",
        "solution": ["find cache -name '*.tmp' -delete"],
    },
    "json-port": {
        "instruction": "config.json describes a server. Write the value of its server port into port.txt.",
        "files": {"config.json": '{"name": "api", "server": {"host": "0.0.0.0", "port": 8443}, "port_note": 80}\n'},
        "check": '[ "$(tr -d " \\n" < port.txt)" = 8443 ]',
        "solution": [
            "cat config.json",
            "python3 -c \"import json; print(json.load(open('config.json'))['server']['port'])\" > port.txt",
        ],
    },
    "dedupe-keep-order": {
        "instruction": "visits.txt has repeated lines. Write each line once, keeping the order of first appearance, "
        "into first_visits.txt.",
        "files": {"visits.txt": "home\nshop\nhome\ncart\nshop\npay\nhome\n"},
        "check": 'printf "home\\nshop\\ncart\\npay\\n" | diff - first_visits.txt',
        "solution": ["awk '!seen[$0]++' visits.txt > first_visits.txt"],
    },
    "csv-average": {
        "instruction": "scores.csv has a header and the columns name,score. Write the average score, with exactly two "
        "decimals, into average.txt.",
        "files": {"scores.csv": "name,score\nana,91\nbo,78\ncy,85\ndee,66\n"},
        "check": '[ "$(tr -d " \\n" < average.txt)" = 80.00 ]',
        "solution": ["awk -F, 'NR > 1 {s += $2; n++} END {printf \"%.2f\\n\", s / n}' scores.csv > average.txt"],
    },
    "replace-in-docs": {
        "instruction": "Replace every 'colour' with 'color' in all .md files under docs/ (in any subfolder); leave "
        "other files unchanged.",
        "files": {
            "docs/intro.md": "Pick a colour.\nThe colour of the sky.\n",
            "docs/guide/style.md": "Background colour: blue\n",
            "docs/notes.txt": "colour stays here\n",
        },
        "check": "! grep -rq colour --include='*.md' docs && grep -q 'Pick a color.' docs/intro.md"
        " && grep -q 'Background color: blue' docs/guide/style.md && grep -qx 'colour stays here' docs/notes.txt",
        "solution": ["grep -rl colour docs", "find docs -name '*.md' -exec sed -i 's/colour/color/g' {} +"],
    },
    "largest-file": {
        "instruction": "Find the largest file under data/ (in any subfolder) and write its path, relative to the "
        "current directory (like data/x/y.bin), into largest.txt.",
        "files": {
            "data/a.txt": "a" * 10 + "\n",
            "data/logs/old.log": "x" * 500 + "\n",
            "data/logs/new.log": "y" * 120 + "\n",
            "data/img/raw.bin": "z" * 300 + "\n",
        },
        "check": '[ "$(tr -d " \\n" < largest.txt)" = data/logs/old.log ]',
        "solution": ["find data -type f -printf '%s %p\\n' | sort -rn | head -1 | cut -d' ' -f2 > largest.txt"],
    },
    "git-first-commit": {
        "instruction": "Turn the current directory into a git repository and commit README.md in a first commit "
        "with the message: initial commit",
        "files": {"README.md": "# Notes\n"},
        "check": "[ \"$(git log --format=%s)\" = 'initial commit' ] && git ls-files --error-unmatch README.md"
        ' && [ -z "$(git status --porcelain)" ]',
        "solution": [
            "git init -q",
            "git add README.md && git -c user.name=Agent -c user.email=agent@example.com commit -qm 'initial commit'",
        ],
    },
    "stop-hanging-script": {
        "instruction": "hang.sh never finishes. Run it with a time limit of 1 second and write the exit status you "
        "get into status.txt.",
        "files": {"hang.sh": "#!/bin/bash\nsleep 600\n"},
        "setup": "chmod +x hang.sh",
        "check": '[ "$(tr -d " \\n" < status.txt)" = 124 ]',
        "solution": ["timeout 1 ./hang.sh; echo $? > status.txt"],
    },
    "eng-staff": {
        "instruction": "staff.csv has the columns name,team. Write the names in team eng, sorted, into eng.txt.",
        "files": {"staff.csv": "name,team\nzoe,eng\nmia,ops\nleo,eng\nava,eng\nben,ops\n"},
        "check": 'printf "ava\\nleo\\nzoe\\n" | diff - eng.txt',
        "solution": ["awk -F, '$2 == \"eng\" {print $1}' staff.csv | sort > eng.txt"],
    },
}


def split_of(task_id: str) -> str:
    """``"test"`` for about one built-in task in four (by a hash of its id), else ``"train"``."""
    return "test" if int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) % TEST_SHARE == 0 else "train"


def builtin_tasks(split: str = "train") -> TaskList:
    """The built-in tasks of ``split`` (``train`` or ``test``): the check tasks of ``BUILTIN`` and the task folders
    shipped in ``task_folders/``."""
    if split not in ("train", "test"):
        raise ValueError(f"the built-in terminal tasks have splits 'train' and 'test', not {split!r}")
    every = {**BUILTIN, **builtin_folders()}
    return TaskList([Task(tid, split, data) for tid, data in every.items() if split_of(tid) == split], split)


def builtin_folders() -> dict[str, dict[str, Any]]:
    """The built-in task folders, by id (the folder's name)."""
    return {folder.name: read_folder(folder) for folder in sorted(BUILTIN_FOLDERS.iterdir()) if folder.is_dir()}


def solution_commands(data: Mapping[str, Any]) -> list[str]:
    """A task's solution as commands, one per turn; a task folder's solution script is one command that runs it
    with bash in the workdir."""
    if "solution" in data:
        return list(data["solution"])
    script = data.get("solution_script")
    if not script:
        return []
    text = (Path(data["folder"]) / script).read_text(encoding="utf-8")
    end = "CLAW_SOLUTION_" + hashlib.sha256(text.encode()).hexdigest()[:12]
    return [f"bash -c \"$(cat <<'{end}'\n{text.rstrip()}\n{end}\n)\""]


def load_tasks(path: str | Path, *, split: str = "test") -> TaskList:
    """Tasks from a JSONL file, a task folder, or a folder of task folders (fields in the module docstring); a bad
    row or folder raises ``ValueError`` naming it."""
    if Path(path).is_dir():
        return load_folders(Path(path), split=split)
    tasks = load_jsonl(path, split=split, id_field="id")
    for row, task in enumerate(tasks, 1):
        problem = validate(task.data)
        if problem:
            raise ValueError(f"{path}: task {task.id!r} (row {row}): {problem}")
    return tasks


class FolderTasks(TaskList):
    """Tasks read from task folders; ``skipped`` names the folders that are half a task, with why."""

    def __init__(self, tasks: list[Task], split: str, skipped: list[tuple[str, str]] | None = None):
        super().__init__(tasks, split)
        self.skipped = list(skipped or [])


def load_folders(path: Path, *, split: str = "test") -> TaskList:
    """One task folder, or every task folder inside ``path`` (sorted; hidden entries skipped). An entry that is a
    dataset rather than a task folder — a folder of task folders, or one with them in ``tasks/`` (TB1's layout) —
    adds its tasks with ids ``<dataset>/<task>``. A folder that is half a task (no instruction or no tests) is
    skipped and named in ``skipped`` (a warning too); one alone, or a folder of nothing else, is an error."""
    if is_task_folder(path):
        return TaskList([Task(path.resolve().name, split, read_folder(path))], split)
    found: list[tuple[str, Path]] = []
    strays = []
    for entry in _subfolders(path):
        if is_task_folder(entry):
            found.append((entry.name, entry))
        elif inner := _dataset(entry):
            found += [(f"{entry.name}/{task.name}", task) for task in inner]
        else:
            strays.append(entry.name)
    if strays:
        raise ValueError(
            f"{path}: {', '.join(strays[:5])}: not task folders (no task.toml, task.yaml or instruction.md)"
        )
    if not found:
        raise ValueError(f"{path}: no task folders in it (and it is not one)")
    tasks, skipped = [], []
    for task_id, folder in found:
        try:
            tasks.append(Task(task_id, split, read_folder(folder)))
        except HalfTask as err:
            skipped.append((task_id, str(err).removeprefix(f"{folder.resolve()}: ")))
    if skipped:
        named = "; ".join(f"{name} ({why})" for name, why in skipped[:5])
        if not tasks:
            raise ValueError(f"{path}: no whole task in it: {named}")
        warnings.warn(f"{path}: skipped {len(skipped)} folder(s) that are half a task: {named}", stacklevel=2)
    return FolderTasks(tasks, split, skipped)


def _subfolders(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith((".", "__")))


def _dataset(path: Path) -> list[Path] | None:
    """The task folders of a dataset folder (directly inside it, or inside its ``tasks/``), or ``None``."""
    for inner in (path / "tasks", path):
        folders = _subfolders(inner) if inner.is_dir() else []
        if folders and all(is_task_folder(p) for p in folders):
            return folders
    return None


def validate(data: Mapping[str, Any]) -> str | None:
    """What is wrong with a task's fields, or ``None``."""
    if "folder" in data:
        for name, kind in FOLDER_REQUIRED.items():
            if not isinstance(data.get(name), kind):
                return f"a task folder's data needs {name!r} ({kind.__name__})"
        return None
    for name, kind in REQUIRED.items():
        if name not in data:
            return f"missing the required field {name!r} (required: {', '.join(REQUIRED)})"
        if not isinstance(data[name], kind) or not data[name].strip():
            return f"the field {name!r} must be a non-empty string"
    for name, kind in OPTIONAL.items():
        if name in data and not isinstance(data[name], kind):
            return f"the field {name!r} must be a {'JSON object' if kind is dict else kind.__name__}"
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in data.get("files", {}).items()):
        return "'files' must map paths to text"
    if not all(isinstance(c, str) for c in data.get("solution", [])):
        return "'solution' must be a list of commands (strings)"
    return None
