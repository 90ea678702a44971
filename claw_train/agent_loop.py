"""Env ↔ policy episodes with token-exact records.

The first prompt is the chat template's render of the opening messages (with the generation prompt).
After that nothing is re-rendered: each turn appends exactly the tokens the policy generated, then the
env's new message(s) as a template *segment* (``\\n<|im_start|>user\\n…<|im_end|>\\n<|im_start|>assistant\\n``
for Qwen-style templates), tokenized on its own. The loss mask is 1 exactly on generated tokens.
:func:`check_drift` compares such a record with a fresh render of the final messages.

A generation cut off by ``max_new_tokens`` (even mid tool call) is sent to the env as it is — the env
answers with its parse error — and the turn keeps ``finish_reason="length"``; the end-of-turn token the
template expects is appended with loss mask 0.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from claw_envs.messages import CutOffText
from claw_train.policy.base import Completion, Policy, PolicyError, SamplingParams
from claw_train.samples.records import EpisodeRecord, TurnRecord

_SENTINEL = "\u2063claw-segment-probe\u2063"


class TokenTranscript:
    """The growing token stream of one episode (see the module docstring)."""

    def __init__(
        self, tokenizer: Any, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None
    ):
        self.tokenizer = tokenizer
        self.tools = [dict(t) for t in tools] if tools else None
        self.messages: list[dict[str, Any]] = [dict(m) for m in messages]
        self.env_messages: list[dict[str, Any]] = [dict(m) for m in messages]
        if not self.messages:
            raise PolicyError("an episode needs at least one opening message")
        text = tokenizer.apply_chat_template(
            self.messages, tools=self.tools, add_generation_prompt=True, tokenize=False
        )
        self.ids: list[int] = tokenizer.encode(text, add_special_tokens=False)
        self.mask: list[int] = [0] * len(self.ids)
        self.logprobs: list[float] = [0.0] * len(self.ids)
        self.end_of_turn, _ = _turn_end(tokenizer, self.tools)
        self.end_of_turn_ids: list[int] = tokenizer.encode(self.end_of_turn, add_special_tokens=False)

    def add_completion(self, completion: Completion) -> None:
        """Append the generated tokens (mask 1) and, if generation stopped early, the end-of-turn token (mask 0)."""
        if len(completion.logprobs) != len(completion.token_ids):
            raise PolicyError(
                f"completion has {len(completion.token_ids)} tokens but {len(completion.logprobs)} log-probs"
            )
        if not completion.token_ids and completion.text:
            raise PolicyError("this policy backend returns no token ids; token-exact rollouts need inprocess or sglang")
        self.ids += completion.token_ids
        self.mask += [1] * len(completion.token_ids)
        self.logprobs += list(completion.logprobs)
        n = len(self.end_of_turn_ids)
        if self.ids[-n:] != self.end_of_turn_ids:
            self.ids += self.end_of_turn_ids
            self.mask += [0] * n
            self.logprobs += [0.0] * n
        self.messages.append({"role": "assistant", "content": completion.text})

    def add_messages(self, new: Sequence[Mapping[str, Any]]) -> None:
        """Append the env's new messages as one template segment ending in the generation prompt (mask 0)."""
        seg = segment_text(self.tokenizer, new, self.tools)
        ids = self.tokenizer.encode(seg, add_special_tokens=False)
        self.ids += ids
        self.mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)
        self.messages += [dict(m) for m in new]

    def sync(self, env_messages: Sequence[Mapping[str, Any]]) -> None:
        """Append what the env added since our last assistant message; raise if the histories disagree.

        An env may store an assistant turn in another form (e.g. OpenAI ``tool_calls``); the transcript
        keeps the text the policy generated, so assistant entries are compared by role only.
        """
        known = len(self.messages)
        if len(env_messages) < known:
            raise PolicyError(f"the env's chat history has {len(env_messages)} messages, the rollout's {known}")
        for i, (ours, theirs) in enumerate(zip(self.messages, env_messages, strict=False)):
            same = ours["role"] == theirs.get("role") and (ours["role"] == "assistant" or ours == dict(theirs))
            if not same:
                raise PolicyError(f"the env's chat history differs from the rollout's at message {i}")
        self.env_messages = [dict(m) for m in env_messages]
        self.add_messages(env_messages[known:])


def segment_text(tokenizer: Any, new: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> str:
    """The template text that follows an assistant turn's end-of-turn token when ``new`` messages are added,
    through the next generation prompt (found by rendering a probe conversation, so any template works)."""
    _eot, after = _turn_end(tokenizer, tools, [dict(m) for m in new])
    return after


def _turn_end(
    tokenizer: Any, tools: Sequence[Mapping[str, Any]] | None, new: list[dict[str, Any]] | None = None
) -> tuple[str, str]:
    probe = [{"role": "user", "content": "?"}, {"role": "assistant", "content": _SENTINEL}, *(new or [])]
    text = tokenizer.apply_chat_template(
        probe, tools=list(tools) if tools else None, add_generation_prompt=True, tokenize=False
    )
    if text.count(_SENTINEL) != 1:
        raise PolicyError("the chat template does not render assistant content verbatim; cannot build token segments")
    after = text.split(_SENTINEL, 1)[1]
    specials = sorted(tokenizer.all_special_tokens, key=len, reverse=True)
    eot = next((s for s in specials if after.startswith(s)), None)
    if eot is None:
        raise PolicyError("the chat template does not end assistant turns with a special token; cannot segment")
    return eot, after[len(eot) :]


# -- episodes ------------------------------------------------------------------------------------


def action_text(completion: Completion) -> str:
    """What the env is sent for ``completion``: its text, marked :class:`~claw_envs.messages.CutOffText` when the
    generation stopped at its token limit (finish reason ``length``), so a family can tell an unfinished reply."""
    if completion.finish_reason == "length":
        return CutOffText(completion.text)
    return completion.text


def _tokenizer_of(policy: Policy) -> Any:
    tok = getattr(policy, "tokenizer", None)
    if tok is None:
        raise PolicyError(f"{type(policy).__name__} has no tokenizer; token-exact rollouts need inprocess or sglang")
    return tok


class EpisodeAgent:
    """Plays one episode through ``agent(obs, info) -> action`` calls (the env pool's agent interface),
    keeping the token-exact record; :meth:`finish` closes it with the final step's results."""

    def __init__(self, policy: Policy, sampling: SamplingParams, *, group_id: str = "", episode_id: str | None = None):
        self.policy = policy
        self.sampling = sampling
        self.tokenizer = _tokenizer_of(policy)
        self.group_id = group_id
        self.episode_id = episode_id or uuid.uuid4().hex[:12]
        self.transcript: TokenTranscript | None = None
        self.turns: list[TurnRecord] = []
        self.task_id = ""
        self._pending: tuple[list[int], list[dict[str, Any]], Completion] | None = None
        self.last: Completion | None = None  # the newest completion (a server answers with it)

    async def __call__(self, obs: Any, info: Mapping[str, Any]) -> str:
        return await self.act(obs, info)

    def begin(self, transcript: TokenTranscript, task_id: str = "") -> None:
        """Start the episode from a transcript rendered elsewhere (a server renders its requests off the loop)."""
        self.transcript = transcript
        self.task_id = task_id

    async def act(
        self,
        obs: Any,
        info: Mapping[str, Any],
        *,
        policy: Policy | None = None,
        sampling: SamplingParams | None = None,
    ) -> str:
        """The next action: the env's answer to the last one recorded, then a generation — by ``policy`` and
        ``sampling`` when given (one streamed request, one client's sampling), else the agent's own."""
        if self.transcript is None:
            self.begin(
                TokenTranscript(self.tokenizer, info["messages"], info.get("tools")), str(info.get("task_id") or "")
            )
        else:
            self.observe(0.0, info)
        prompt_ids = list(self.transcript.ids)
        before = [dict(m) for m in self.transcript.messages]
        completion = await (policy or self.policy).generate(prompt_ids, sampling or self.sampling)
        self.transcript.add_completion(completion)
        self._pending = (prompt_ids, before, completion)
        self.last = completion
        return action_text(completion)

    @property
    def pending(self) -> bool:
        """Whether an action was sent whose next state has not been recorded yet."""
        return self._pending is not None

    def abandon(self, status: str) -> None:
        """Record the pending turn without a next state (the env step failed or timed out); ``status`` masks it."""
        if self._pending is None:
            return
        prompt_ids, before, completion = self._pending
        self._pending = None
        self.turns.append(self._turn(prompt_ids, before, completion, len(self.turns) + 1, None, 0.0, status))

    def _turn(
        self,
        prompt_ids: list[int],
        before: list[dict[str, Any]],
        completion: Completion,
        step_index: int,
        next_state: Any,
        reward: float,
        status: str,
    ) -> TurnRecord:
        return TurnRecord(
            episode_id=self.episode_id,
            group_id=self.group_id,
            task_id=self.task_id,
            step_index=step_index,
            prompt_ids=prompt_ids,
            completion_ids=list(completion.token_ids),
            logprobs=list(completion.logprobs),
            policy_version=completion.policy_version,
            messages=before,
            action_text=completion.text,
            finish_reason=completion.finish_reason,
            next_state=next_state,
            reward=float(reward),
            status=status,
            prompt_start=len(self.turns[-1].prompt_ids) if self.turns else 0,
        )

    def set_rewards(self, rewards: Sequence[float]) -> None:
        """The env's reward of each recorded turn, in order (a pool reports them when the episode ends)."""
        self.turns[: len(rewards)] = [
            dataclasses.replace(turn, reward=float(r)) for turn, r in zip(self.turns, rewards, strict=False)
        ]

    def observe(self, reward: float, info: Mapping[str, Any]) -> None:
        """Record the env's answer to the pending action (its new messages, next state and status)."""
        if self._pending is None or self.transcript is None:
            return
        prompt_ids, before, completion = self._pending
        self._pending = None
        self.transcript.sync(info["messages"])
        step = int(info.get("step_index", len(self.turns) + 1))
        self.turns.append(
            self._turn(
                prompt_ids, before, completion, step, info.get("next_state"), reward, str(info.get("status", "ok"))
            )
        )

    def finish(
        self,
        *,
        terminated: bool,
        truncated: bool,
        seed: int | None = None,
        status: str | None = None,
        info: Mapping[str, Any] | None = None,
    ) -> EpisodeRecord:
        """The finished episode's record (``status`` defaults to the last non-ok turn status, else ``ok``)."""
        t = self.transcript
        ns = self.turns[-1].next_state if self.turns else None
        bad = [turn.status for turn in self.turns if turn.status != "ok"]
        return EpisodeRecord(
            episode_id=self.episode_id,
            group_id=self.group_id,
            task_id=self.task_id,
            turns=self.turns,
            token_ids=list(t.ids) if t else [],
            loss_mask=list(t.mask) if t else [],
            logprobs=list(t.logprobs) if t else [],
            messages=[dict(m) for m in t.messages] if t else [],
            tools=t.tools if t else None,
            env_messages=t.env_messages if t else [],
            outcome=getattr(ns, "outcome", None),
            total_reward=sum(turn.reward for turn in self.turns),
            terminated=terminated,
            truncated=truncated,
            status=status or (bad[-1] if bad else "ok"),
            seed=seed,
            info=dict(info or {}),
        )


# -- drift check ---------------------------------------------------------------------------------


def check_drift(record: EpisodeRecord, tokenizer: Any) -> list[str]:
    """Differences between ``record``'s tokens and a fresh chat-template render of its final messages.

    Empty means token-exact. Each entry says where and what: a text difference (the record does not
    decode to the transcript), a token difference (same text, other tokens: the policy produced a
    non-canonical tokenization, or a segment was tokenized differently), a bad loss mask, or a turn
    whose prompt/completion does not sit where it should in the episode's token stream.
    """
    problems: list[str] = []
    n = len(record.token_ids)
    if len(record.loss_mask) != n or len(record.logprobs) != n:
        problems.append(f"lengths differ: {n} tokens, {len(record.loss_mask)} mask, {len(record.logprobs)} log-probs")
    fresh_text = tokenizer.apply_chat_template(
        record.messages, tools=record.tools, add_generation_prompt=True, tokenize=False
    )
    text = tokenizer.decode(record.token_ids, skip_special_tokens=False)
    if text != fresh_text:
        i = _first_difference(text, fresh_text)
        ours, theirs = text[max(0, i - 20) : i + 30], fresh_text[max(0, i - 20) : i + 30]
        problems.append(f"text differs at character {i}: record {ours!r} vs render {theirs!r}")
    fresh = tokenizer.encode(fresh_text, add_special_tokens=False)
    if fresh != record.token_ids:
        i = _first_difference(record.token_ids, fresh)
        generated = i < len(record.loss_mask) and record.loss_mask[i]
        where = "a generated span" if generated else "template/observation tokens"
        problems.append(
            f"tokens differ from the fresh render at token {i} ({where}): record has {n} tokens, render {len(fresh)}"
        )
    expected_mask = [0] * n
    for k, turn in enumerate(record.turns):
        start, end = len(turn.prompt_ids), len(turn.prompt_ids) + len(turn.completion_ids)
        if record.token_ids[:start] != turn.prompt_ids:
            problems.append(f"turn {k}: its prompt ids are not a prefix of the episode's tokens")
        if record.token_ids[start:end] != turn.completion_ids:
            problems.append(f"turn {k}: its completion ids do not follow its prompt in the episode's tokens")
        if len(turn.logprobs) != len(turn.completion_ids):
            problems.append(f"turn {k}: {len(turn.completion_ids)} tokens but {len(turn.logprobs)} log-probs")
        expected_mask[start:end] = [1] * (end - start)
    if record.loss_mask != expected_mask[: len(record.loss_mask)]:
        i = _first_difference(record.loss_mask, expected_mask)
        problems.append(f"loss mask is wrong at token {i}: it must be 1 exactly on generated tokens")
    return problems


def _first_difference(a: Sequence[Any], b: Sequence[Any]) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
