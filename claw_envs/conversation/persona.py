"""Simulated-user personas as data: one YAML file each, loaded into :class:`Persona`.

Built-in personas live in ``claw_envs/conversation/personas/``; drop a ``<name>.yaml`` there or pass
the path of your own file (``persona="path/to/me.yaml"``). A file gives the user's voice (openings,
thanks, give-up lines), the hidden preferences in priority order (each a check from
``score.CHECKS`` with a complaint and a correction phrasing), what the user says when a reply is
unusable (``reask``) and replies in the preferred style (``replies``). See ``student.yaml``.

Loading checks the file: unknown checks or fields, missing phrasings, and any phrasing that the
signal extractor would misread (a complaint that does not read as negative, a thanks that does not
read as positive, a correction that is not picked up as the directive) are errors, so a new persona
cannot silently feed a trainer the wrong signal.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from claw_envs.conversation.score import CHECKS, INVALID_KINDS, MAX_REPLY_CHARS
from claw_envs.conversation.signals import extract_signals

PERSONAS_DIR = Path(__file__).parent / "personas"
REASK_KINDS = ("missing_answer", "wrong_answer", *INVALID_KINDS)
OPTIONAL_REASK = {"cut_off": "too_long"}
"""Reactions a persona file may leave out, and the one used in their place."""
WELL_FORMED = "a well-formed reply that states a final number"
_SAMPLE_FIELDS = {
    "question": "Q?",
    "answer": "3",
    "steps": "1 + 2 = 3",
    "steps_is": "1 + 2 is 3",
    "work": "1 + 2 = 4",
    "student_answer": "4",
    "good_step": "1 + 1 = 2",
    "bad_step": "1 + 2 = 4",
    "fixed_step": "1 + 2 = 3",
    "cap": str(MAX_REPLY_CHARS),
}


@dataclass(frozen=True)
class Phrasing:
    """How the user reacts to one kind of miss: a complaint sentence and a corrective instruction."""

    complaints: tuple[str, ...]
    corrections: tuple[str, ...]

    def compose(self, rng: np.random.Generator, **fields: Any) -> str:
        """One complaint followed by one correction, picked with ``rng``."""
        return f"{pick(self.complaints, rng)} {pick(self.corrections, rng)}".format(**fields)


@dataclass(frozen=True)
class Preference:
    """One hidden preference: a named check (with parameters) and how the user complains about a miss."""

    name: str
    check: str
    description: str
    params: Mapping[str, Any]
    phrasing: Phrasing


@dataclass(frozen=True)
class Persona:
    """A simulated user. ``kind`` is ``solve`` (the agent answers) or ``grade`` (the agent grades given work)."""

    name: str
    kind: str
    description: str
    patience: int
    opening: tuple[str, ...]
    next_problem: tuple[str, ...]
    thanks: tuple[str, ...]
    give_up: tuple[str, ...]
    preferences: tuple[Preference, ...]
    reask: Mapping[str, Phrasing]
    replies: Mapping[str, tuple[str, ...]]
    source: Path

    def preference(self, name: str) -> Preference:
        """The preference called ``name`` (``StopIteration`` when the persona has none)."""
        return next(p for p in self.preferences if p.name == name)


def pick(options: tuple[str, ...], rng: np.random.Generator) -> str:
    """One of ``options``, drawn with ``rng``."""
    return options[int(rng.integers(len(options)))]


def available_personas() -> list[str]:
    """Names of the built-in personas."""
    return sorted(p.stem for p in PERSONAS_DIR.glob("*.yaml"))


def load_persona(persona: str | Path | Persona) -> Persona:
    """A built-in persona by name, or a persona file by path (``ValueError`` with the reason otherwise)."""
    if isinstance(persona, Persona):
        return persona
    path = Path(persona)
    if not path.is_file():
        path = PERSONAS_DIR / f"{persona}.yaml"
    if not path.is_file():
        raise ValueError(
            f"unknown persona {str(persona)!r}: built-in ones are {', '.join(available_personas())}, "
            "or pass the path of a persona YAML file"
        )
    return _load(str(path.resolve()))


@functools.lru_cache(maxsize=32)
def _load(path: str) -> Persona:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML ({err})") from None
    try:
        persona = _build(data, Path(path))
    except (KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{path}: malformed persona ({type(err).__name__}: {err})") from None
    _check_phrasings(persona)
    return persona


def _strings(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    items = data.get(key)
    if not items or not isinstance(items, list) or not all(isinstance(s, str) and s.strip() for s in items):
        raise ValueError(f"{where}: {key!r} must be a non-empty list of strings")
    return tuple(items)


def _phrasing(data: Mapping[str, Any], where: str) -> Phrasing:
    return Phrasing(_strings(data, "complaints", where), _strings(data, "corrections", where))


def _build(data: Mapping[str, Any], path: Path) -> Persona:
    where = str(path)
    unknown = set(data) - {
        "name",
        "kind",
        "description",
        "patience",
        "opening",
        "next_problem",
        "thanks",
        "give_up",
        "preferences",
        "reask",
        "replies",
    }
    if unknown:
        raise ValueError(f"{where}: unknown fields {sorted(unknown)}")
    kind = data.get("kind", "solve")
    if kind not in ("solve", "grade"):
        raise ValueError(f"{where}: kind must be 'solve' or 'grade', not {kind!r}")
    reask = {
        k: _phrasing(data["reask"].get(k) or {}, f"{where}: reask.{k}")
        for k in REASK_KINDS
        if k in data["reask"] or k not in OPTIONAL_REASK
    }
    for k, fallback in OPTIONAL_REASK.items():
        reask.setdefault(k, reask[fallback])
    prefs = [Preference("well_formed", "well_formed", WELL_FORMED, {}, reask["missing_answer"])]
    for i, item in enumerate(data["preferences"]):
        name = item["name"]
        check = item.get("check", name)
        params = dict(item.get("params") or {})
        if check not in CHECKS:
            raise ValueError(f"{where}: preference {name!r} uses unknown check {check!r}; known: {sorted(CHECKS)}")
        try:
            inspect.signature(CHECKS[check]).bind(None, **params)
        except TypeError as err:
            raise ValueError(f"{where}: preference {name!r}: bad params for {check!r} ({err})") from None
        prefs.append(
            Preference(name, check, str(item.get("description", name)), params, _phrasing(item, f"{where}: #{i}"))
        )
    if len({p.name for p in prefs}) != len(prefs):
        raise ValueError(f"{where}: preference names must be unique (well_formed is built in)")
    replies = data["replies"]
    needed = ("default",) if kind == "solve" else ("right", "wrong")
    persona = Persona(
        name=str(data.get("name", path.stem)),
        kind=kind,
        description=" ".join(str(data.get("description", "")).split()),
        patience=int(data.get("patience", 3)),
        opening=_strings(data, "opening", where),
        next_problem=_strings(data, "next_problem", where),
        thanks=_strings(data, "thanks", where),
        give_up=_strings(data, "give_up", where),
        preferences=tuple(prefs),
        reask=reask,
        replies={k: _strings(replies, k, f"{where}: replies") for k in needed},
        source=path,
    )
    placeholders = ("{question}", "{work}") if kind == "grade" else ("{question}",)
    for text in persona.opening + persona.next_problem:
        if not all(p in text for p in placeholders):
            raise ValueError(f"{where}: opening/next_problem {text!r} must contain {' and '.join(placeholders)}")
    if persona.patience < 1:
        raise ValueError(f"{where}: patience must be at least 1")
    return persona


def _check_phrasings(persona: Persona) -> None:
    """Every phrasing must be read by ``extract_signals`` the way the simulator means it."""
    where = str(persona.source)
    for text in persona.opening + persona.next_problem + sum(persona.replies.values(), ()):
        try:
            text.format(**_SAMPLE_FIELDS)
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(f"{where}: {text!r} uses an unknown placeholder ({err})") from None
    for text in persona.thanks:
        signals = extract_signals(text)
        if signals.evaluative.score != 1.0:
            raise ValueError(f"{where}: thanks {text!r} does not read as thanks ({signals.kind})")
    phrasings = [p.phrasing for p in persona.preferences] + list(persona.reask.values())
    for phrasing in phrasings:
        for complaint in phrasing.complaints:
            for correction in phrasing.corrections:
                for tail in ("", *(f" {g}" for g in persona.give_up)):
                    text = f"{complaint} {correction}{tail}".format(**_SAMPLE_FIELDS)
                    signals = extract_signals(text)
                    if signals.evaluative.score >= 0 or signals.directive != correction.format(**_SAMPLE_FIELDS):
                        raise ValueError(
                            f"{where}: {text!r} reads as {signals.kind} with directive {signals.directive!r}; "
                            f"a complaint must read as negative and {correction!r} must be its corrective sentence"
                        )
