"""`claw-envs`: list the registered environments and watch scripted episodes' next-state signals."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

if TYPE_CHECKING:
    from claw_envs.check import TaskCheck
    from judges import Judgement

PROCEDURAL_CHECKS = 50
"""Tasks of a procedural generator ``claw-envs check`` plays by default (it could make a million)."""

app = typer.Typer(
    add_completion=False, no_args_is_help=True, rich_markup_mode=None, help="List, try and judge claw environments."
)
console = Console(soft_wrap=True)  # a piped log keeps each message on one line
UsageError = typer.BadParameter.__mro__[1]  # click's UsageError, from wherever this typer takes click


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``claw-envs``; a usage error or a value it refuses (an unknown env, a bad ``--tasks``) is one line on
    stderr, ``claw-envs <command>: <what is wrong>``, with exit status 2, as ``claw-train`` says them."""
    args = sys.argv[1:] if argv is None else list(argv)
    if not args:  # the command list, as `claw-envs --help` prints it, and the usage error's status
        app(args=["--help"], prog_name="claw-envs", standalone_mode=False)
        return 2
    try:
        return int(app(args=args, prog_name="claw-envs", standalone_mode=False) or 0)
    except UsageError as err:
        where = err.ctx.command_path if err.ctx is not None else "claw-envs"
        hint = err.param_hint if isinstance(err, typer.BadParameter) and isinstance(err.param_hint, str) else None
        message = f"{hint}: {err.message}" if hint else err.format_message()
        print(f"{where}: {' '.join(message.split())}", file=sys.stderr)
        return 2
    except typer.Abort:
        print("claw-envs: aborted", file=sys.stderr)
        return 1


@app.command("list")
def list_envs() -> None:
    """Print every registered env id with its family and task counts per split (tab-separated in a pipe)."""
    import claw_envs

    table = Table("family (--env)", "track", "train tasks", "test tasks", "what it is")
    table.columns.insert(0, Column("id", no_wrap=True))
    rows = []
    for env_id in claw_envs.env_ids():
        spec = claw_envs.family_spec(env_id)
        counts = []
        for split in ("train", "test"):
            try:
                counts.append(claw_envs.env_class(env_id).default_tasks(split).describe())
            except Exception as err:  # a listing must not die on one family
                counts.append(f"error: {type(err).__name__}")
        rows.append((env_id, spec.name, spec.track, *counts, spec.description))
    if not console.is_terminal:  # grep- and cut-friendly, never squeezed to 80 columns
        for row in rows:
            print("\t".join(row))
        return
    for row in rows:
        table.add_row(*row[:-1], escape(row[-1]))
    console.print(table)


@app.command()
def demo(
    env: Annotated[list[str] | None, typer.Option(help="Env ids (default: every registered env).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for the task draw.")] = 0,
) -> None:
    """Run one scripted episode per env: a junk action, then reference actions until it ends; print the signals."""
    import gymnasium as gym

    import claw_envs

    try:
        env_ids = [claw_envs.resolve_id(name) for name in env] if env else claw_envs.env_ids()
    except KeyError as err:
        raise typer.BadParameter(str(err.args[0]), param_hint="--env") from None
    for env_id in env_ids:
        env_obj = gym.make(env_id).unwrapped
        try:
            obs, info = env_obj.reset(seed=seed)
            console.rule(f"[bold]{env_id}[/bold]  task {info['task_id']}")
            console.print(f"[cyan]observation:[/cyan] {escape(str(obs)[:300])}")
            action: str | None = "???"
            while action is not None:
                obs, reward, terminated, truncated, info = env_obj.step(action)
                ns = info["next_state"]
                console.print(f"[magenta]action:[/magenta] {escape(repr(action[:200]))}")
                console.print(
                    f"  next state ({ns.role}, step {ns.step_index}): {ns.text[:300]!r}\n"
                    f"  evaluative {ns.evaluative.score:+.1f} {list(ns.evaluative.tags)}  "
                    f"directive {ns.directive!r}  outcome {ns.outcome}  reward {reward}  status {info['status']}",
                    markup=False,
                )
                action = None if terminated or truncated else env_obj.reference_action()
        finally:
            env_obj.close()


@app.command()
def check(
    env: Annotated[str, typer.Argument(help="Family name or env id, e.g. terminal or claw/SWE-v0.")],
    tasks: Annotated[
        str | None,
        typer.Option("--tasks", help="Tasks to check instead of the built-in ones (file, folder, id)."),
    ] = None,
    split: Annotated[str, typer.Option(help="train | test | all.")] = "all",
    repos: Annotated[
        str | None, typer.Option(help="Repository source, for envs that take one (a directory or a URL template).")
    ] = None,
    env_kwarg: Annotated[
        list[str] | None, typer.Option("--env-kwarg", help="KEY=VALUE passed to the env (value read as YAML).")
    ] = None,
    jobs: Annotated[int, typer.Option(min=1, help="Envs checking tasks at once.")] = 1,
    limit: Annotated[
        int | None,
        typer.Option(
            min=1,
            help=f"Check at most this many tasks per split (default: every task of a list or folder, the first "
            f"{PROCEDURAL_CHECKS} of a procedural generator, which makes as many as asked).",
        ),
    ] = None,
    provision: Annotated[
        bool, typer.Option("--provision", help="First install the system packages the tasks lack (apt, as root).")
    ] = False,
) -> None:
    """Check every task once: its oracle solution must solve it and doing nothing must not; exit 1 naming the
    tasks that fail or that this machine cannot run, and why. A task that passes with an approximate environment,
    and one with no solution to play (only doing nothing is checked), are listed apart."""
    import asyncio

    import gymnasium as gym

    import claw_envs
    from claw_envs.check import check_env
    from claw_train.options.families import spec_for, tasks_for
    from claw_train.options.tree import ConfigError
    from claw_train.options.yaml_text import option_values
    from claw_train.runlog.progress import Progress

    if split not in ("train", "test", "all"):
        raise typer.BadParameter(f"{split!r} is not one of train, test, all", param_hint="--split")
    pairs = [item.partition("=") for item in env_kwarg or []]
    if any(not sep or not key for key, sep, _ in pairs):
        raise typer.BadParameter("each --env-kwarg is KEY=VALUE", param_hint="--env-kwarg")
    kwargs = option_values({key: value for key, _, value in pairs})
    if repos is not None:
        kwargs["repos"] = repos
    try:
        spec = spec_for(env)
        sources = [tasks_for(spec, tasks, name) for name in (("train", "test") if split == "all" else (split,))]
    except ConfigError as err:
        raise UsageError(str(err)) from None
    results: list[TaskCheck] = []
    todo = _unique_tasks(sources, limit)
    _skipped_folders(sources)
    _provision(spec.env_id, todo, kwargs, install=provision)

    async def run_split(source: claw_envs.TaskSource, ids: list[str], bar: Progress) -> None:
        envs = [gym.make(spec.env_id, tasks=source, split=source.split, **kwargs).unwrapped for _ in range(jobs)]

        def done(result: TaskCheck) -> None:
            results.append(result)
            bar.advance(note=f"{sum(r.problem is not None for r in results)} failed")

        try:
            await asyncio.gather(*(check_env(e, ids[i::jobs], done) for i, e in enumerate(envs)))
        finally:
            for e in envs:
                await e.aclose()

    with Progress(f"checking {spec.name} tasks", sum(len(ids) for _, ids in todo)) as bar:
        for source, ids in todo:
            asyncio.run(run_split(source, ids, bar))
    if not _report_checks(results, spec.name):
        raise typer.Exit(1)


@app.command("provision")
def provision_command(
    env: Annotated[str, typer.Argument(help="Family name or env id, e.g. terminal.")],
    tasks: Annotated[str, typer.Option("--tasks", help="The tasks whose system packages to install.")],
    split: Annotated[str, typer.Option(help="train | test | all.")] = "all",
) -> None:
    """Install the system packages the tasks need and this machine lacks (apt, as root), then say what is still
    missing; an env with nothing to provision says so."""
    from claw_train.options.families import spec_for, tasks_for
    from claw_train.options.tree import ConfigError

    try:
        spec = spec_for(env)
        names = ("train", "test") if split == "all" else (split,)
        sources = [tasks_for(spec, tasks, name) for name in names]
    except ConfigError as err:
        raise UsageError(str(err)) from None
    _skipped_folders(sources)
    reports = _provision(spec.env_id, _unique_tasks(sources), {}, install=True)
    if not reports:
        console.print(f"{spec.name}: nothing to provision (its tasks name no system packages)")
    if any(r.error or r.unknown for r in reports):
        raise typer.Exit(1)


@app.command()
def judge(
    env: Annotated[str, typer.Option(help="Env id or short name, e.g. echo or claw/Echo-v0.")],
    backend: Annotated[str, typer.Option(help="rules | policy | openai://HOST:PORT[/v1]")] = "rules",
    votes: Annotated[int, typer.Option(min=1, help="Judge samples per step (m).")] = 3,
    seed: Annotated[int, typer.Option(help="Seed for the task draw.")] = 0,
    judge_model: Annotated[
        str | None, typer.Option(help="Model name at an openai:// judge (default: $CLAW_JUDGE_MODEL or 'default').")
    ] = None,
    model: Annotated[str, typer.Option(help="Policy model for --backend policy (tiny, HF id or path).")] = "tiny",
    policy: Annotated[str, typer.Option(help="Policy backend for --backend policy.")] = "inprocess",
    show_prompt: Annotated[bool, typer.Option(help="Print the rendered PRM prompt of each step.")] = False,
) -> None:
    """Run one scripted episode (a junk action, then reference actions until it ends) and print each step's
    judge votes, score and hint — for tuning judge prompts."""
    import asyncio

    import gymnasium as gym

    import claw_envs
    import judges

    try:
        env_id = claw_envs.resolve_id(env)
    except KeyError as err:
        raise typer.BadParameter(str(err.args[0]), param_hint="--env") from None
    spec = claw_envs.family_spec(env_id)
    family = spec.name
    policy_obj = None
    if backend == "policy":
        from claw_train.policy import PolicyError
        from claw_train.policy.loader import load_policy

        try:
            policy_obj = load_policy(model, policy, family=family)
        except PolicyError as err:
            raise typer.BadParameter(str(err), param_hint="--model/--policy") from None
    try:
        step_judge = judges.make_judge(backend, family=spec, votes=votes, policy=policy_obj, model=judge_model)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--backend") from None
    env_obj = gym.make(env_id).unwrapped

    async def episode() -> None:
        try:
            obs, info = await env_obj.areset(seed=seed)
            prm_name, hint_name = spec.judge.prm, spec.judge.hint
            console.rule(f"[bold]{env_id}[/bold]  task {info['task_id']}  judge {backend} × {votes}")
            console.print(f"templates: {prm_name}, {hint_name}\n[cyan]observation:[/cyan] {escape(str(obs)[:300])}")
            action: str | None = "???"
            while action is not None:
                _, _, terminated, truncated, info = await env_obj.astep(action)
                ns = info["next_state"]
                console.print(f"\n[magenta]step {ns.step_index} action:[/magenta] {escape(repr(action[:200]))}")
                console.print(f"[cyan]next state ({ns.role}):[/cyan] {escape(repr(ns.text[:300]))}")
                if show_prompt:
                    try:
                        for message in judges.render(prm_name, ns, action, history=info["messages"]):
                            console.print(f"[dim]--- {message['role']} ---[/dim]")
                            console.print(message["content"], markup=False)
                    except judges.PromptError as err:
                        console.print(f"[red]prompt error:[/red] {escape(str(err))}")
                verdict = await step_judge.judge(action, ns, info["messages"])
                _print_judgement(verdict)
                if terminated or truncated:
                    break
                action = env_obj.reference_action()
            counters = {k: v for k, v in step_judge.metrics_dict().items() if v}
            console.print(f"\n[dim]judge counters: {counters}[/dim]")
        finally:
            await step_judge.aclose()
            await env_obj.aclose()
            if policy_obj is not None:
                await policy_obj.aclose()

    asyncio.run(episode())


def _unique_tasks(sources: list[Any], limit: int | None = None) -> list[tuple[Any, list[str]]]:
    """``(source, task ids)`` per split, each task once (one task in both splits, a folder read as train and as test,
    is checked once); at most ``limit`` a split (``None``: all, but :data:`PROCEDURAL_CHECKS` of a generator)."""
    from claw_envs.tasks import ProceduralTasks

    seen: set[tuple[str, str]] = set()
    todo = []
    for source in sources:
        ids = []
        most = limit or (PROCEDURAL_CHECKS if isinstance(source, ProceduralTasks) else None)
        if most is not None and most < len(source):
            console.print(f"{source.split}: checking the first {most:,} of {len(source):,} tasks (--limit)")
        for task in itertools.islice(source, most):
            if (task.id, task.hash) not in seen:
                seen.add((task.id, task.hash))
                ids.append(task.id)
        if ids:
            todo.append((source, ids))
    return todo


def _provision(env_id: str, todo: list[tuple[Any, list[str]]], kwargs: dict[str, Any], *, install: bool) -> list[Any]:
    """Ask the env (when it provisions: ``provision_system``) what system packages the tasks lack, and install them
    when ``install``; print what it says. Its reports (none when the env has nothing to provision)."""
    import gymnasium as gym

    import claw_envs

    if not hasattr(claw_envs.env_class(env_id), "provision_system"):
        return []
    reports: list[Any] = []
    for source, ids in todo:
        env = gym.make(env_id, tasks=source, split=source.split, **kwargs).unwrapped
        try:
            report = env.provision_system(ids, install=install)
        finally:
            env.close()
        if (install or report.asked) and report.summary() not in {r.summary() for r in reports}:
            hint = f" (install: `{report.command}`, or add --provision)" if report.asked and not install else ""
            console.print(escape(report.summary() + hint))
        reports.append(report)
    return reports


def _skipped_folders(sources: list[Any]) -> None:
    """Name the task folders a source skipped (half a task: no instruction or no tests), each once."""
    seen = set()
    for source in sources:
        for name, why in getattr(source, "skipped", ()):
            if name not in seen:
                seen.add(name)
                console.print(f"[yellow]skipped, not a whole task:[/yellow] {escape(name)}: {escape(why)}")


def _report_checks(results: list[TaskCheck], family: str) -> bool:
    """Print each check and the summary (runs here, runs approximately, no oracle, refused with why, failing);
    whether every task passed."""
    _print_checks(results)
    by: dict[str, list[TaskCheck]] = {}
    for r in results:
        by.setdefault(r.verdict, []).append(r)
    passed = sum(r.problem is None for r in results)
    console.print(f"{passed} of {len(results)} {family} tasks pass the check.")
    parts = [f"runs here: {len(by.get('runs', []))}", f"runs approximately: {len(by.get('approximate', []))}"]
    parts += [f"no oracle (no solution to play; loadable): {len(by.get('no_oracle', []))}"]
    parts += [f"refused: {len(by.get('refused', []))}", f"failed: {len(by.get('failed', []))}"]
    console.print("; ".join(parts) + ".")
    for verdict, label in (("approximate", "ran with an approximate environment"), ("no_oracle", "no oracle")):
        if by.get(verdict):
            console.print(f"{label}: {escape(', '.join(r.task_id for r in by[verdict]))}")
    for r in by.get("refused", []):
        console.print(f"[red]refused:[/red] {escape(r.task_id)}: {escape(str(r.refused))}")
    if by.get("failed"):
        console.print(f"[red]failing:[/red] {escape(', '.join(r.task_id for r in by['failed']))}")
    return passed == len(results)


def _print_checks(results: list[TaskCheck]) -> None:
    """One row per checked task: a table on a terminal, tab-separated lines in a pipe (ids never cut)."""
    from claw_envs.check import NO_SOLUTION

    rows = []
    for r in results:
        null = "—" if r.null is None else str(r.null.outcome)
        if r.problem is not None:
            verdict, style = r.problem[:300], "red"
        elif r.no_oracle:
            verdict, style = f"ok, {NO_SOLUTION}: only doing nothing was checked", "yellow"
            verdict += "; approximate environment: " + "; ".join(r.oracle.approximations)[:300] if r.approximate else ""
        elif r.approximate:
            verdict, style = "ok, approximate environment: " + "; ".join(r.oracle.approximations)[:300], "yellow"
        else:
            verdict, style = "ok", "green"
        oracle = "—" if r.no_oracle else str(r.oracle.outcome)
        rows.append((r.task_id, oracle, null, f"{r.seconds:.1f}", verdict, style))
    if not console.is_terminal:
        for row in rows:
            print("\t".join(row[:-1]))
        return
    table = Table("task", "oracle", "null", "s", "verdict")
    for *cells, verdict, style in rows:
        table.add_row(*cells, f"[{style}]{escape(verdict)}[/{style}]")
    console.print(table)


def _print_judgement(verdict: Judgement) -> None:
    """A table of every PRM and hint vote, then the step's score and hint."""

    table = Table("kind", "#", "score", "s", "answer (tail) or error")
    for kind, votes in (("prm", verdict.votes), ("hint", verdict.hint_votes)):
        for i, vote in enumerate(votes):
            score = "—" if vote.score is None else f"{vote.score:+d}"
            answer = f"[red]{escape(vote.error)}[/red]" if vote.error else escape(repr(vote.text[-160:]))
            if kind == "hint":
                answer += "  [green]accepted[/green]" if vote.hint else "  [yellow]rejected[/yellow]"
            table.add_row(kind, str(i), score, f"{vote.latency:.2f}", answer)
    console.print(table)
    state = "" if verdict.available else "  [red](judge unavailable: mask this step)[/red]"
    console.print(f"[bold]score {verdict.score:+.0f}[/bold]{state}   [bold]hint:[/bold] {escape(repr(verdict.hint))}")
