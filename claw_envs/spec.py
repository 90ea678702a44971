"""``FamilySpec``: everything the trainer, the judges and ``claw-eval`` need to know about an env family.

A family declares one spec in its own package and passes it to :func:`claw_envs.register`. Nothing outside
the family's folder names the family: ``claw_train`` and ``judges`` read the spec. Hooks that would pull in
heavy code (task loaders, evaluation extensions, the live-session adapter) are import strings
(``"package.module:attribute"``), resolved only when used, so ``claw_envs`` never imports torch.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from claw_envs.core import NextState

Track = Literal["personal", "agent"]
Bootstrap = Literal["demonstrations", "none"]

NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]*")
ID_PATTERN = re.compile(r"claw/[A-Za-z][A-Za-z0-9_]*-v\d+")


class SpecError(ValueError):
    """A family spec that is incomplete or malformed (the message names the field)."""


class LiveAdapter(Protocol):
    """What ``FamilySpec.live`` names: how ``claw-serve`` reads a live chat as the family's episode."""

    def next_state(
        self, new: Sequence[Mapping[str, Any]], before: Sequence[Mapping[str, Any]], action: str, step: int
    ) -> NextState:
        """The next state of a served turn: ``new`` messages the client sent after it; ``before`` is the chat up to
        and including the request the turn answered; ``action`` the reply; ``step`` its step index."""
        ...

    def tool_calls(self, text: str, tools: Sequence[Mapping[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
        """A reply's text split into its content and OpenAI ``tool_calls`` for the request's ``tools``."""
        ...


@dataclass(frozen=True)
class JudgeTemplates:
    """The judge prompt templates of a family: names in ``prompts/`` or paths to ``.jinja`` files it ships."""

    prm: str = "prm_generic"
    """The PRM (score) template."""
    hint: str = "hint_agent"
    """The hint (OPD) template."""
    directive_is_negative: bool = True
    """Whether the rules judge scores a step -1 when the env says 0 but sends a directive (a correction)."""
    hint_check: str = "prm_hint_check"
    """The template a model judge answers "does this reply break the user's earlier hint?" with
    (``claw-eval --sessions``)."""


@dataclass(frozen=True)
class TrainingDefaults:
    """How ``claw-train`` treats this family: the run options it sets when the user does not (``None``: the config
    tree's own default), and how a model is made ready for it (the tiny model's bootstrap, a named model's warm
    start, the tiny tokenizer's corpus)."""

    method: str = "combined"
    """binary | opd | combined."""
    max_new_tokens: int = 160
    """Generation budget per turn."""
    max_turns: int | None = None
    """Turn limit per episode (None: the env's own default)."""
    group_size: int = 4
    """Agent track: episodes per task, normalised together by step index."""
    rollout_workers: int = 4
    """Episodes (personal track) or groups (agent track) in flight at once."""
    eval_every: int = 0
    """claw-train: held-out evaluation every N updates (0: never)."""
    replay: float = 0.0
    """Tiny models: weight of the supervised loss on the family's own demonstrations added to every update
    (``claw_train.training.replay``), which keeps what the bootstrap taught while the updates move the policy."""
    bootstrap: Bootstrap = "demonstrations"
    """How ``--model tiny`` starts: trained briefly on the env's ``demonstrations()``, or ``none`` (untrained)."""
    bootstrap_steps: int | None = None
    """Optimizer steps of that bootstrap (None: the tiny model's default, 500); long demonstrations want fewer."""
    warm_start_steps: int = 0
    """LoRA steps a named pretrained model (``smollm2``) takes on the env's demonstrations before it acts here (0:
    none; for a format such a model does not write on its own)."""
    tokenizer_corpus: bool = False
    """Whether the env's demonstrations also feed the tiny tokenizer's corpus (built-in families only)."""

    def __post_init__(self) -> None:
        if self.bootstrap not in ("demonstrations", "none"):
            raise SpecError(f"TrainingDefaults.bootstrap must be 'demonstrations' or 'none', got {self.bootstrap!r}")
        if self.bootstrap_steps is not None and self.bootstrap_steps < 1:
            raise SpecError(f"TrainingDefaults.bootstrap_steps must be at least 1, got {self.bootstrap_steps}")
        if self.warm_start_steps < 0:
            raise SpecError(f"TrainingDefaults.warm_start_steps must be 0 or more, got {self.warm_start_steps}")


@dataclass(frozen=True)
class FamilySpec:
    """One env family, declared once (see the module docstring)."""

    name: str
    """The ``--env`` name (lower case), e.g. ``toolcall``."""
    env_id: str
    """The Gymnasium id, ``claw/<Name>-v<N>``."""
    entry_point: str
    """``"module:Class"`` of the :class:`~claw_envs.core.ClawEnv` subclass."""
    track: Track = "agent"
    """``personal``: turns stream one by one and sessions can be served live; ``agent``: G rollouts per task."""
    judge: JudgeTemplates = field(default_factory=JudgeTemplates)
    """Judge templates and the rules judge's reading of directives."""
    training: TrainingDefaults = field(default_factory=TrainingDefaults)
    """Defaults for ``claw-train``, and how a model is made ready for the family (bootstrap, warm start)."""
    load_tasks: str | None = None
    """``"module:function"``: ``function(source, split) -> TaskSource`` reads ``--tasks`` (file, folder, dataset)."""
    evaluation: str | None = None
    """``"module:Class"``: an evaluation extension (extra per-task fields and metrics); None: the generic one."""
    live: str | None = None
    """Personal track: ``"module:Class"`` reading a served chat: ``next_state(...)`` and ``tool_calls(...)``."""
    env_options: tuple[str, ...] = ()
    """Run options passed to the env constructor by name (e.g. ``persona``)."""
    description: str = ""
    """One line for ``claw-envs list``."""

    def __post_init__(self) -> None:
        if not NAME_PATTERN.fullmatch(self.name or ""):
            raise SpecError(f"FamilySpec.name must be lower case letters, digits or '_', got {self.name!r}")
        if not ID_PATTERN.fullmatch(self.env_id or ""):
            raise SpecError(f"FamilySpec.env_id must look like 'claw/Name-v0', got {self.env_id!r}")
        if self.track not in ("personal", "agent"):
            raise SpecError(f"FamilySpec.track must be 'personal' or 'agent', got {self.track!r}")
        for name in ("entry_point", "load_tasks", "evaluation", "live"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or ":" not in value):
                raise SpecError(f"FamilySpec.{name} must be an import string 'module:attribute', got {value!r}")
        if self.track == "agent" and self.live is not None:
            raise SpecError("FamilySpec.live is for the personal track (claw-serve sessions)")


def resolve(target: str) -> Any:
    """The object an import string ``"package.module:attribute.path"`` names."""
    module, _, name = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj
