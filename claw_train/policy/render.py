"""Chat messages to the exact prompt ids a policy is sent: what every backend, the OPD teacher and claw-serve's
one-off turns render prompts with (no backend needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from claw_train.policy.base import Message, PolicyError


def render_prompt(
    tokenizer: Any, prompt: Sequence[Message] | Sequence[int], *, tools: Sequence[Mapping[str, Any]] | None = None
) -> list[int]:
    """Exact ids as given, or chat messages rendered by the tokenizer's template with the generation prompt."""
    items = list(prompt)
    if not items:
        raise PolicyError("empty prompt")
    if all(isinstance(t, int) for t in items):
        return [int(t) for t in items]
    if not all(isinstance(m, Mapping) and "role" in m for m in items):
        raise PolicyError("prompt must be a list of token ids or a list of chat messages with a 'role'")
    if not getattr(tokenizer, "chat_template", None):
        raise PolicyError("this tokenizer has no chat template; pass prompt token ids instead of messages")
    try:
        text = tokenizer.apply_chat_template(
            [dict(m) for m in items], tools=list(tools) if tools else None, add_generation_prompt=True, tokenize=False
        )
    except Exception as err:
        raise PolicyError(f"chat template failed on these messages: {err}") from err
    return tokenizer.encode(text, add_special_tokens=False)
