"""Harbor-layout task corpora from the wild through ``claw-envs check``'s logic (prints a breakdown; not a test).

Two steps, for developers (CI machines have no network, and the corpora are not in the repository):

* ``sample``: copy a seeded random sample of task folders out of a corpus — a folder, or a bare git repository such
  as the one the ``fetch`` tool or ``git clone --bare`` leaves (files git stores as missing blobs are left out and
  counted) — into ``INTO/<corpus>/``, with ``SAMPLE.json`` naming the origin, its commit, the seed and the folders.
* ``run``: check every task of every corpus under ``--tasks`` (one folder per corpus) as ``claw-envs check terminal``
  does, each task once: the oracle and the do-nothing agent, or only the latter for a task with no solution. Each
  task is then **runs** (here, as its Dockerfile asks), **approximate** (runs, with what differs listed), **no
  oracle** (no solution to play; provisioned, prepared and graded with nothing done), **refused** (this machine
  lacks what it needs; why) or **failed**; half tasks (no instruction or no tests) are named and skipped. With
  ``--provision`` the apt packages the refused tasks lack are installed (as root) and those tasks checked again:
  the breakdown is written before and after.

Writes ``bench/results/harbor-corpora.json`` (``--results``, ``--name``): per corpus ``origin`` (from SAMPLE.json),
``task_folders``, ``half_tasks``, ``before`` and ``after`` (``counts`` of each verdict, ``loadable`` = runs +
approximate + no oracle, ``share`` = loadable / task folders), ``refusals`` (reason → task count, after), and
``tasks`` (``task``, ``before``, ``after``, ``why``); ``provisioning`` (what apt was asked, installed, did not know).

Run: ``.venv/bin/python bench/harbor_corpora.py sample --source GIT_OR_DIR --under PATH --corpus NAME --n 30
--seed 0 --into /tmp/harbor-sample``, then ``.venv/bin/python bench/harbor_corpora.py run --tasks /tmp/harbor-sample
--provision`` (task virtualenvs come from PyPI the first time and are cached).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import record

from claw_envs.check import TaskCheck, check_env
from claw_envs.terminal import TerminalEnv
from claw_envs.terminal.folders import is_task_folder, read_folder
from claw_envs.terminal.provision import plan

VERDICTS = ("runs", "approximate", "no_oracle", "refused", "failed")
NETWORK = re.compile(r"(the task's setup|the test script|a command of the episode) need(?:s|ed)? the network")


def sample(source: Path, under: str, corpus: str, n: int, seed: int, into: Path) -> Path:
    """Copy ``n`` task folders (seeded) of ``source`` (a folder, or a bare git repository's ``under``) into
    ``into/corpus``; the folder made."""
    git = (source / "HEAD").is_file() and (source / "objects").is_dir()
    names = _git_folders(source, under) if git else sorted(p.name for p in (source / under).iterdir() if p.is_dir())
    chosen = sorted(random.Random(seed).sample(names, min(n, len(names))))
    out = into / corpus
    out.mkdir(parents=True, exist_ok=True)
    missing = 0
    for name in chosen:
        if git:
            missing += _git_export(source, f"{under.rstrip('/')}/{name}", out / name)
        else:
            subprocess.run(["cp", "-a", str(source / under / name), str(out / name)], check=True)
    commit = _git(source, "rev-parse", "HEAD").strip() if git else None
    origin = {"source": str(source), "under": under, "commit": commit, "seed": seed, "of": len(names)}
    (out / "SAMPLE.json").write_text(json.dumps({**origin, "missing_blobs": missing, "folders": chosen}, indent=1))
    print(f"{corpus}: {len(chosen)} of {len(names)} folders (seed {seed}) into {out}; {missing} files absent")
    return out


def _git(repo: Path, *args: str, data: bytes | None = None) -> str:
    return subprocess.run(
        ["git", f"--git-dir={repo}", *args], capture_output=True, check=True, input=data
    ).stdout.decode()


def _git_folders(repo: Path, under: str) -> list[str]:
    listing = _git(repo, "ls-tree", "-d", "--name-only", f"HEAD:{under.rstrip('/')}")
    return sorted(line for line in listing.splitlines() if line)


def _git_export(repo: Path, folder: str, out: Path) -> int:
    """Write ``folder``'s files out of the repository; how many git lacks (large files a snapshot leaves out)."""
    entries = []
    for line in _git(repo, "ls-tree", "-r", "HEAD", folder).splitlines():
        meta, path = line.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "blob" and mode != "120000":
            entries.append((mode, sha, path))
    proc = subprocess.Popen(
        ["git", f"--git-dir={repo}", "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    missing = 0
    for mode, sha, path in entries:
        proc.stdin.write(f"{sha}\n".encode())
        proc.stdin.flush()
        header = proc.stdout.readline().split()
        if header[-1] == b"missing":
            missing += 1
            continue
        data = proc.stdout.read(int(header[2]))
        proc.stdout.read(1)
        dest = out / os.path.relpath(path, folder)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        dest.chmod(0o755 if mode == "100755" else 0o644)
    proc.stdin.close()
    proc.wait()
    return missing


def check_corpus(folder: Path, ids: list[str] | None = None) -> tuple[list[TaskCheck], list[tuple[str, str]]]:
    """Every task of one corpus folder checked (or those of ``ids``), and the half tasks it skipped."""
    env = TerminalEnv(tasks=str(folder), split="test")
    try:
        todo = [task.id for task in env.tasks if ids is None or task.id in ids]
        return asyncio.run(check_env(env, todo)), list(getattr(env.tasks, "skipped", []))
    finally:
        env.close()


def reasons(result: TaskCheck) -> list[str]:
    """A refused or failed task's reasons, grouped: paths cut to their first folder, commands left out."""
    text = result.refused or result.problem or ""
    if network := NETWORK.search(text):
        return [f"{network[1]} needs the network"]
    text = re.sub(r"^(?:oracle|null agent): \[\w+\] ", "", text)
    text = text.removeprefix("this machine lacks what the task needs: ").removesuffix(" (use sandbox='docker')")
    out = []
    for part in re.split(r"; (?=apt |Dockerfile |WORKDIR|`|and \d+ more)", text):
        if part.startswith("apt packages not installed here: "):
            names = part.removeprefix("apt packages not installed here: ").split(" (install")[0]
            out += [f"apt package missing: {name}" for name in names.split(", ")]
        elif part.startswith("WORKDIR "):
            out.append("WORKDIR where the local sandbox keeps its own folders (/home, /root, /tmp, /var)")
        elif not part.startswith("and "):
            why = part.rstrip("`").rsplit(" (", 1)[-1].rstrip(")") if part.startswith("Dockerfile") else part
            why = re.sub(r"(?<![\w.])(/[\w.+-]+)(/[\w.+/-]*)?", lambda m: m[1] + ("/…" if m[2] else ""), why)
            out.append(" ".join(re.sub(r" outside the workdir \S+", " outside the workdir", why).split())[:160])
    return out


def static_scan(corpus: Path) -> dict[str, Any]:
    """Every task folder of a whole corpus read and planned, nothing run: how many this machine could provision
    as they are, and the kinds of refusal (a task counted once per kind it has)."""
    kinds: Counter[str] = Counter()
    alone: Counter[str] = Counter()
    counts = Counter()
    for folder in sorted(p for p in corpus.iterdir() if p.is_dir() and is_task_folder(p)):
        try:
            data = read_folder(folder)
        except ValueError:
            counts["unreadable"] += 1
            continue
        found = plan(data)
        if found.problem is None:
            counts["approximate" if found.approximations else "exact"] += 1
            continue
        counts["refused"] += 1
        have = {_kind(part) for part in [*(["apt"] if found.missing_apt else []), *data["unsupported"]]}
        have |= {"workdir"} if "WORKDIR " in found.problem else set()
        have |= {"link_to_missing_program"} if "which this machine lacks" in found.problem else set()
        kinds.update(have)
        alone.update([" + ".join(sorted(have))])
    total = sum(counts.values())
    provisionable = counts["exact"] + counts["approximate"]
    return {
        "task_folders": total,
        "counts": dict(counts),
        "share": provisionable / max(total, 1),
        "refusal_kinds": dict(kinds.most_common()),
        "refusal_combinations": dict(alone.most_common(12)),
    }


def _kind(part: str) -> str:
    """The kind of one refusal line of a plan (for :func:`static_scan`)."""
    if part == "apt":
        return "apt_missing"
    if "outside the workdir" in part:
        return "writes_outside_workdir"
    if "cannot place files" in part:
        return "copies_into_system_folders"
    if "network" in part or "installs packages with" in part:
        return "network"
    return "other"


def breakdown(results: list[TaskCheck], total: int) -> dict[str, Any]:
    """Counts of each verdict, the loadable count and share."""
    counts = Counter(r.verdict for r in results)
    loadable = counts["runs"] + counts["approximate"] + counts["no_oracle"]
    return {"counts": {v: counts[v] for v in VERDICTS}, "loadable": loadable, "share": loadable / max(total, 1)}


def run(tasks: Path, provision: bool) -> dict[str, Any]:
    """Check every corpus under ``tasks``; provision and check the refused ones again when asked."""
    corpora = sorted(p for p in tasks.iterdir() if p.is_dir() and not is_task_folder(p))
    found = {c.name: check_corpus(c) for c in corpora}
    provisioned = None
    after = {name: {r.task_id: r for r in results} for name, (results, _skipped) in found.items()}
    if provision:
        provisioned = _provision_all(found, corpora)
        for corpus in corpora:
            again = [r.task_id for r in found[corpus.name][0] if _lacks_apt(r)]
            if again:
                after[corpus.name].update({r.task_id: r for r in check_corpus(corpus, again)[0]})
    out: dict[str, Any] = {"provisioning": provisioned, "corpora": {}}
    for corpus in corpora:
        results, skipped = found[corpus.name]
        out["corpora"][corpus.name] = _corpus_values(corpus, results, list(after[corpus.name].values()), skipped)
    return out


def _lacks_apt(result: TaskCheck) -> bool:
    return bool(result.refused and "apt packages not installed here" in result.refused)


def _provision_all(found: dict[str, Any], corpora: list[Path]) -> dict[str, Any]:
    """Install, as ``claw-envs provision`` does, what the refused tasks of every corpus lack."""
    reports = []
    for corpus in corpora:
        ids = [r.task_id for r in found[corpus.name][0] if _lacks_apt(r)]
        if not ids:
            continue
        env = TerminalEnv(tasks=str(corpus), split="test")
        try:
            report = env.provision_system(ids, install=True)
        finally:
            env.close()
        print(report.summary())
        reports.append(report.to_info())
    merged: dict[str, list[str]] = {"asked": [], "installed": [], "unknown": [], "errors": []}
    for report in reports:
        for key in ("asked", "installed", "unknown"):
            merged[key] = sorted({*merged[key], *report[key]})
        merged["errors"] += [report["error"]] if report["error"] else []
    return merged


def _corpus_values(corpus: Path, before: list[TaskCheck], after: list[TaskCheck], skipped: list) -> dict[str, Any]:
    origin_file = corpus / "SAMPLE.json"
    origin = json.loads(origin_file.read_text()) if origin_file.is_file() else {"source": str(corpus)}
    origin.pop("folders", None)
    total = len(before) + len(skipped)
    by_id = {r.task_id: r for r in after}
    rows, refusals = [], Counter()
    for r in before:
        last = by_id.get(r.task_id, r)
        if last.verdict in ("refused", "failed"):
            refusals.update(set(reasons(last)))
        why = last.refused or last.problem or "; ".join(last.oracle.approximations)
        rows.append({"task": r.task_id, "before": r.verdict, "after": last.verdict, "why": why[:400]})
    rows += [{"task": name, "before": "half_task", "after": "half_task", "why": why} for name, why in skipped]
    return {
        "origin": origin,
        "task_folders": total,
        "half_tasks": len(skipped),
        "before": breakdown(before, total),
        "after": breakdown(after, total),
        "refusals": dict(refusals.most_common()),
        "tasks": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    take = sub.add_parser("sample", help="copy a seeded sample of a corpus's task folders")
    take.add_argument("--source", type=Path, required=True, help="A corpus folder or a bare git repository.")
    take.add_argument("--under", default=".", help="The folder of task folders inside it.")
    take.add_argument("--corpus", required=True, help="A name for the corpus (the folder made under --into).")
    take.add_argument("--n", type=int, default=30)
    take.add_argument("--seed", type=int, default=0)
    take.add_argument("--into", type=Path, required=True)
    check = sub.add_parser("run", help="check the sampled corpora and write the breakdown")
    check.add_argument("--tasks", type=Path, required=True, help="A folder holding one folder per corpus.")
    check.add_argument("--provision", action="store_true", help="Install what refused tasks lack (apt, as root).")
    check.add_argument(
        "--static",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="Also read and plan every folder of a whole "
        "corpus, running nothing (how much its Dockerfiles allow here).",
    )
    record.options(check, "harbor-corpora")
    args = parser.parse_args()
    if args.command == "sample":
        sample(args.source, args.under, args.corpus, args.n, args.seed, args.into)
        return
    started = time.monotonic()
    values = run(args.tasks, args.provision)
    values["seconds"] = time.monotonic() - started
    values["static"] = {}
    for item in args.static:
        name, _, folder = item.partition("=")
        values["static"][name] = scan = static_scan(Path(folder))
        print(f"\n{name} (static, every folder read, nothing run): {scan['counts']}, provisionable {scan['share']:.0%}")
        print(f"  refusal kinds: {scan['refusal_kinds']}")
    for name, corpus in values["corpora"].items():
        before, after = corpus["before"], corpus["after"]
        print(f"\n{name}: {corpus['task_folders']} folders ({corpus['half_tasks']} half tasks)")
        print(f"  before provisioning: {before['counts']}  loadable {before['loadable']} ({before['share']:.0%})")
        print(f"  after provisioning:  {after['counts']}  loadable {after['loadable']} ({after['share']:.0%})")
        for why, count in list(corpus["refusals"].items())[:12]:
            print(f"    {count:>3}  {why}")
    record.write(args.name, values, folder=args.results)


if __name__ == "__main__":
    main()
