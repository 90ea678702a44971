"""Options made whole: every ``None`` default filled in from the env family's spec, the model's preset and the command
(:func:`resolve`), and checked — ranges, the method, and a ``--model`` path or cached hub id (:func:`check`), before
torch is imported. :func:`build` does the same for options set from Python."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from claw_train.advantages import METHODS
from claw_train.models.named import builds_here, is_named
from claw_train.models.presets import preset, preset_for
from claw_train.options.tree import Args, ConfigError, get, options, replace
from claw_train.policy.base import PolicyError
from claw_train.policy.hf import check_cached_offline, local_path

if TYPE_CHECKING:
    from claw_envs import FamilySpec

TRAIN_UPDATES = 16
TRAIN_STALENESS = 2
SERVE_STALENESS = 8


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
    """The model preset's values of the options left at None (:mod:`claw_train.models.presets`)."""
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
    "micro_batch_tokens": 1,
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
