"""Simulated users: how a persona reacts to the agent's reply.

* :class:`RulesSimulator` (default) — deterministic given the env's seed: a reply that is unusable
  (empty, junk, too long, a bare tool call, another language) gets the persona's re-ask for that case;
  a missing final number gets a re-ask; otherwise the first preference the reply misses gets a
  complaint plus a correction (what a reply looks like is noticed before whether its number is right,
  as a person skimming it would); a wrong number in a reply that meets every preference gets a re-ask;
  a reply that meets everything and is right gets thanks. Phrasing is picked with the env's
  ``np_random``.
* :class:`LLMSimulator` — the same personas played by a model behind any OpenAI-compatible
  ``/chat/completions`` endpoint (SGLang, vLLM, a hosted API), prompted with
  ``prompts/personas/<name>.jinja`` (``generic.jinja`` for personas without their own template).
  Endpoint failures raise :class:`~claw_envs.core.InfraFailure` (``simulator_failure``) so trainers
  mask the step instead of learning from it.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import jinja2
import numpy as np

from claw_envs.conversation.persona import Persona, pick
from claw_envs.conversation.rubric import RubricResult
from claw_envs.conversation.score import MAX_REPLY_CHARS
from claw_envs.conversation.signals import extract_signals
from claw_envs.conversation.tasks import Problem, StudentWork, fmt
from claw_envs.core import InfraFailure, StepStatus
from prompts import PROMPTS_DIR

PERSONA_PROMPTS = PROMPTS_DIR / "personas"


@dataclass(frozen=True)
class Turn:
    """Everything a simulated user may look at when reacting to one reply."""

    persona: Persona
    problem: Problem
    work: StudentWork | None
    request: str  # the user message that posed the problem
    reply: str  # the agent's reply, cut at MAX_REPLY_CHARS
    reply_length: int  # its full length in characters
    rubric: RubricResult
    attempt: int  # 1 for the first reply to this problem
    history: Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Reaction:
    """What the user says about the reply, and whether they are satisfied (then they move on)."""

    text: str
    satisfied: bool


class Simulator:
    """A backend that plays a persona."""

    name = "base"

    async def react(self, turn: Turn, rng: np.random.Generator) -> Reaction:
        """The user's reply to ``turn``; ``rng`` makes any random choice."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release connections."""


class RulesSimulator(Simulator):
    """Deterministic reactions from the persona file and the rubric (see the module docstring)."""

    name = "rules"

    async def react(self, turn: Turn, rng: np.random.Generator) -> Reaction:
        """Thanks for a well-formed, correct reply meeting every preference; else a complaint about its first fault."""
        persona, result = turn.persona, turn.rubric
        if result.invalid_kind is not None:
            phrasing = persona.reask[result.invalid_kind]
        elif result.final is None:
            phrasing = persona.reask["missing_answer"]
        else:
            missed = [p for p in persona.preferences if not result.met[p.name]]
            if missed:
                phrasing = missed[0].phrasing
            elif not result.correct:
                phrasing = persona.reask["wrong_answer"]
            else:
                return Reaction(pick(persona.thanks, rng), satisfied=True)
        return Reaction(phrasing.compose(rng, cap=MAX_REPLY_CHARS), satisfied=False)


_VERDICT = re.compile(r"\[\[\s*(NOT SATISFIED|SATISFIED)\s*\]\]", re.I)


class LLMSimulator(Simulator):
    """A persona played by a chat model behind an OpenAI-compatible endpoint.

    The model is asked to answer as the user in a few sentences and to end with ``[[SATISFIED]]`` or
    ``[[NOT SATISFIED]]``; the tag is removed from the text the agent sees. A reply with no tag counts
    as satisfied only if it reads as thanks to the signal extractor.
    """

    name = "llm"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        temperature: float = 0.7,
        max_tokens: int = 200,
        timeout: float = 60.0,
        retries: int = 2,
        client: httpx.AsyncClient | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.retries = retries
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.AsyncClient(timeout=timeout, headers=headers)
        self._own_client = client is None
        self._templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(PERSONA_PROMPTS)),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
        )

    @classmethod
    def from_env(cls, **overrides: Any) -> LLMSimulator:
        """Built from ``CLAW_SIMULATOR_URL``, ``CLAW_SIMULATOR_MODEL`` and ``CLAW_SIMULATOR_API_KEY``."""
        options = {
            "base_url": os.environ.get("CLAW_SIMULATOR_URL"),
            "model": os.environ.get("CLAW_SIMULATOR_MODEL", "default"),
            "api_key": os.environ.get("CLAW_SIMULATOR_API_KEY"),
            **overrides,
        }
        if not options["base_url"]:
            raise ValueError(
                "simulator='llm' needs an endpoint: set CLAW_SIMULATOR_URL (e.g. http://127.0.0.1:30000/v1) "
                "or pass simulator_options={'base_url': ..., 'model': ...}"
            )
        return cls(**options)

    def prompt(self, turn: Turn) -> str:
        """The persona prompt for this turn (``prompts/personas/<name>.jinja`` or ``generic.jinja``)."""
        name = turn.persona.name if (PERSONA_PROMPTS / f"{turn.persona.name}.jinja").is_file() else "generic"
        cut = turn.reply_length - len(turn.reply)
        reply = turn.reply + (f"\n[... {cut} more characters not shown: the reply was cut here]" if cut else "")
        return self._templates.get_template(f"{name}.jinja").render(
            persona=turn.persona,
            preferences=[p.description for p in turn.persona.preferences],
            question=turn.problem.question,
            answer=fmt(turn.problem.answer),
            work=turn.work.text() if turn.work else None,
            work_correct=turn.work.correct if turn.work else None,
            request=turn.request,
            history=[m for m in turn.history if m.get("role") in ("user", "assistant")],
            reply=reply,
            attempt=turn.attempt,
        )

    async def react(self, turn: Turn, rng: np.random.Generator) -> Reaction:
        """The model's reply in character; satisfied per its last verdict tag (no tag: if it thanks)."""
        body = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": self.prompt(turn)},
                {"role": "user", "content": "Write your next message to the assistant now."},
            ],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "seed": int(rng.integers(2**31)),
        }
        content = await self._complete(body)
        tags = _VERDICT.findall(content)
        text = _VERDICT.sub("", content).strip()
        if not text:
            raise InfraFailure("the simulator model returned an empty message", StepStatus.SIMULATOR_FAILURE)
        satisfied = tags[-1].upper() == "SATISFIED" if tags else extract_signals(text).kind == "thanks"
        return Reaction(text, satisfied)

    async def _complete(self, body: dict[str, Any]) -> str:
        url = f"{self.base_url}/chat/completions"
        error = "no attempt made"
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(0.2 * 2**attempt)
            try:
                response = await self._client.post(url, json=body)
            except httpx.HTTPError as err:
                error = f"{type(err).__name__}: {err}"
                continue
            if response.status_code >= 500 or response.status_code == 429:
                error = f"HTTP {response.status_code}: {response.text[:200]}"
                continue
            if response.status_code >= 400:
                raise InfraFailure(
                    f"simulator endpoint {url} refused the request: HTTP {response.status_code} {response.text[:200]}",
                    StepStatus.SIMULATOR_FAILURE,
                )
            try:
                content = response.json()["choices"][0]["message"]["content"]
            except (ValueError, KeyError, IndexError, TypeError):
                raise InfraFailure(
                    f"simulator endpoint {url} sent a malformed reply: {response.text[:200]!r}",
                    StepStatus.SIMULATOR_FAILURE,
                ) from None
            if not isinstance(content, str):
                raise InfraFailure(f"simulator endpoint {url} sent no message text", StepStatus.SIMULATOR_FAILURE)
            return content
        raise InfraFailure(
            f"simulator endpoint {url} failed after {self.retries + 1} tries ({error})", StepStatus.SIMULATOR_FAILURE
        )

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()


def make_simulator(simulator: str | Simulator, options: Mapping[str, Any] | None = None) -> Simulator:
    """``"rules"``, ``"llm"`` (endpoint from ``options`` or the environment) or a ready :class:`Simulator`."""
    if isinstance(simulator, Simulator):
        return simulator
    if simulator == "rules":
        return RulesSimulator()
    if simulator == "llm":
        return LLMSimulator.from_env(**dict(options or {}))
    raise ValueError(f"simulator must be 'rules', 'llm' or a Simulator instance, not {simulator!r}")
