"""Load the judge templates and render them into chat messages for one step.

Templates live in ``prompts/`` (a name such as ``prm_terminal``) or in a family's own package (a path to a
``.jinja`` file, which may include the shared partials of ``prompts/``). Every template starts with a header
naming the fields it needs, e.g. ``{# needs: task, history?, action, result #}`` (``?`` marks a field that may
be absent), and defines two blocks, ``system`` and ``user``. Field values come from
``next_state.judge_inputs``; ``action`` defaults to the action judged, ``result`` to ``next_state.text`` and
``history`` to the chat before the action. A template that needs ``image`` gets ``next_state.image`` attached to
its user message as an ``image_url`` part with a data URL.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from claw_envs import FamilySpec, JudgeTemplates, family_spec
from claw_envs.core import NextState
from prompts import PROMPTS_DIR

MAX_FIELD_CHARS = 6000
MAX_MESSAGE_CHARS = 1500

_HEADER = re.compile(r"\A\s*\{#\s*needs:(?P<fields>[^#]*)#\}")
_FIELD = re.compile(r"[a-z_][a-z0-9_]*\??")


class PromptError(ValueError):
    """A template is missing, malformed, or the next state lacks fields it needs (named in the message)."""

    def __init__(self, message: str, *, template: str = "", missing: Sequence[str] = ()):
        super().__init__(message)
        self.template = template
        self.missing = tuple(missing)


@dataclass(frozen=True)
class TemplateSpec:
    """A template's name and the ``judge_inputs`` fields its header declares."""

    name: str
    required: tuple[str, ...]
    optional: tuple[str, ...]

    @property
    def fields(self) -> tuple[str, ...]:
        """Every field the template reads, required first."""
        return self.required + self.optional


def templates_for(family: str | FamilySpec | JudgeTemplates) -> JudgeTemplates:
    """The judge templates a family's spec declares; a name no family is registered under gets the generic pair."""
    if isinstance(family, JudgeTemplates):
        return family
    if isinstance(family, FamilySpec):
        return family.judge
    try:
        return family_spec(family).judge
    except KeyError:
        return JudgeTemplates()


def template_names() -> list[str]:
    """Every judge template in ``prompts/`` (partials starting with ``_`` and ``personas/`` excluded)."""
    return sorted(p.stem for p in PROMPTS_DIR.glob("*.jinja") if not p.name.startswith("_"))


@functools.cache
def _environment(directory: Path = PROMPTS_DIR) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader([directory, PROMPTS_DIR]),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )


@functools.cache
def load(name: str) -> tuple[jinja2.Template, TemplateSpec]:
    """The compiled template ``name`` (in ``prompts/``, with or without ``.jinja``, or a path) and its fields."""
    if "/" in name:
        path = Path(name).expanduser()
        name = path.stem
        if not path.is_file():
            raise PromptError(f"no judge template file {path}", template=name)
    else:
        name = name.removesuffix(".jinja")
        path = PROMPTS_DIR / f"{name}.jinja"
        if not path.is_file():
            raise PromptError(f"no judge template {name!r} in {PROMPTS_DIR}; have: {', '.join(template_names())}")
    source = path.read_text(encoding="utf-8")
    header = _HEADER.match(source)
    if header is None:
        raise PromptError(f"template {name!r} must start with a '{{# needs: field, field? #}}' header", template=name)
    fields = [f.strip() for f in header.group("fields").split(",") if f.strip()]
    bad = [f for f in fields if not _FIELD.fullmatch(f)]
    if bad:
        raise PromptError(f"template {name!r} declares malformed fields {bad}", template=name)
    try:
        template = _environment(path.parent.resolve()).get_template(path.name)
    except jinja2.TemplateSyntaxError as err:
        raise PromptError(f"template {name!r} line {err.lineno}: {err.message}", template=name) from None
    missing_blocks = {"system", "user"} - set(template.blocks)
    if missing_blocks:
        raise PromptError(f"template {name!r} lacks blocks {sorted(missing_blocks)}", template=name)
    spec = TemplateSpec(
        name,
        tuple(f for f in fields if not f.endswith("?")),
        tuple(f.removesuffix("?") for f in fields if f.endswith("?")),
    )
    return template, spec


def clip(text: str, limit: int = MAX_FIELD_CHARS, *, keep: str = "both") -> str:
    """Shorten ``text`` to about ``limit`` characters, saying how much was cut (``keep``: "both" ends or "tail")."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    if keep == "tail":
        return f"[... {cut} earlier characters cut ...]\n{text[-limit:]}"
    head = limit * 2 // 3
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[len(text) - (limit - head) :]}"


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, Mapping) and part.get("type") in ("image_url", "image"):
                parts.append("[image]")
        return "\n".join(parts)
    return "" if content is None else str(content)


def format_history(messages: Sequence[Mapping[str, Any]]) -> str:
    """Chat messages as ``[role] text`` lines, each message clipped."""
    lines = []
    for m in messages:
        text = _content_text(m.get("content"))
        if m.get("tool_calls"):
            text += "\n[tool calls] " + json.dumps(m["tool_calls"], ensure_ascii=False, default=str)
        lines.append(f"[{m.get('role', '?')}] {clip(text.strip(), MAX_MESSAGE_CHARS)}")
    return "\n".join(lines)


def history_before_action(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The chat before the last assistant turn (the action being judged and what followed are shown apart)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            return list(messages[:i])
    return list(messages)


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, Sequence) and value and all(isinstance(v, Mapping) and "role" in v for v in value):
        return format_history(value)
    if isinstance(value, Mapping):
        return "\n".join(f"{k}: {_as_text(v)}" for k, v in value.items())
    return str(value)


def image_data_url(image: bytes) -> str:
    """``data:`` URL for PNG (or JPEG) bytes, the form OpenAI-compatible multimodal endpoints accept."""
    mime = "image/jpeg" if image[:2] == b"\xff\xd8" else "image/png"
    return f"data:{mime};base64,{base64.b64encode(image).decode('ascii')}"


def step_fields(
    next_state: NextState, action: str, history: Sequence[Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """Every value a template can ask for: defaults first, then the family's ``judge_inputs``."""
    values: dict[str, Any] = {"action": action, "result": next_state.text}
    if history is not None:
        values["history"] = history_before_action(history)
    values.update({k: v for k, v in next_state.judge_inputs.items() if v is not None})
    if next_state.image:
        values["image"] = next_state.image
    return values


def render(
    template_name: str,
    next_state: NextState,
    action: str,
    *,
    history: Sequence[Mapping[str, Any]] | None = None,
    max_field_chars: int = MAX_FIELD_CHARS,
) -> list[dict[str, Any]]:
    """Chat messages (system, user) judging ``action`` given ``next_state``; ``history`` is the chat so far.

    Raises :class:`PromptError` naming every required field the next state does not provide.
    """
    template, spec = load(template_name)
    values = step_fields(next_state, action, history)
    missing = [f for f in spec.required if values.get(f) is None]
    if missing:
        have = sorted(values)
        raise PromptError(
            f"template {spec.name!r} needs judge_inputs {missing} that this next state lacks (it has {have})",
            template=spec.name,
            missing=missing,
        )
    context: dict[str, Any] = {}
    for f in spec.fields:
        value = values.get(f)
        if f == "image":
            context[f] = value is not None
        elif value is None:
            context[f] = None
        else:
            keep = "tail" if f == "history" else "both"
            context[f] = clip(_as_text(value), max_field_chars, keep=keep)
    try:
        system, user = ("".join(template.blocks[b](template.new_context(context))).strip() for b in ("system", "user"))
    except jinja2.UndefinedError as err:
        raise PromptError(f"template {spec.name!r} uses a field its header does not declare: {err}") from None
    user_content: str | list[dict[str, Any]] = user
    if "image" in spec.fields and values.get("image") is not None:
        user_content = [
            {"type": "text", "text": user},
            {"type": "image_url", "image_url": {"url": image_data_url(bytes(values["image"]))}},
        ]
    return [{"role": "system", "content": system}, {"role": "user", "content": user_content}]
