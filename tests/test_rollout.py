"""Token-exact rollouts: multi-turn tool episodes, loss masks, truncated tool calls, drift checks."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import pytest

import claw_envs  # noqa: F401  (registers the envs)
from claw_train.agent_loop import EpisodeAgent, check_drift
from claw_train.models import tiny
from claw_train.policy import Completion, Policy, PolicyError, SamplingParams
from claw_train.policy.inprocess import InProcessPolicy
from claw_train.samples.records import EpisodeRecord


async def rollout_episode(
    env: Any,
    policy: Policy,
    sampling: SamplingParams,
    *,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    group_id: str = "",
    episode_id: str | None = None,
) -> EpisodeRecord:
    """One episode of a ClawEnv against ``policy``, as the pipeline's agent plays it (the env pool's loop, inline)."""
    base = env if hasattr(env, "astep") else env.unwrapped
    agent = EpisodeAgent(policy, sampling, group_id=group_id, episode_id=episode_id)
    obs, info = await base.areset(seed=seed, options=options)
    terminated = truncated = False
    while not (terminated or truncated):
        action = await agent(obs, info)
        obs, reward, terminated, truncated, info = await base.astep(action)
        agent.observe(reward, info)
    return agent.finish(terminated=terminated, truncated=truncated, seed=seed)


@pytest.fixture(scope="module")
def model() -> InProcessPolicy:
    pol = InProcessPolicy(tiny.build_tiny())
    yield pol
    pol.close()


class ScriptedPolicy(Policy):
    """Says what ``script()`` returns, tokenized canonically, with the tiny model's real log-probs for those tokens."""

    def __init__(self, model: InProcessPolicy, script: Callable[[], str]):
        self.model, self.script, self.tokenizer = model, script, model.tokenizer

    async def generate(self, prompt, sampling: SamplingParams) -> Completion:
        ids = [*self.tokenizer.encode(self.script(), add_special_tokens=False), self.model.eos_ids[0]]
        finish = "stop"
        if len(ids) > sampling.max_new_tokens:
            ids, finish = ids[: sampling.max_new_tokens], "length"
        body = ids[:-1] if finish == "stop" else ids
        return Completion(
            text=self.tokenizer.decode(body, skip_special_tokens=False),
            token_ids=ids,
            logprobs=await self.model.logprobs(list(prompt), ids),
            finish_reason=finish,
            policy_version=self.model.version,
            prompt_ids=list(prompt),
        )


def assert_token_exact(record, tokenizer) -> None:
    """The record decodes to the transcript, turns sit where they should, the mask is exactly the generated tokens."""
    render = tokenizer.apply_chat_template(
        record.messages, tools=record.tools, add_generation_prompt=True, tokenize=False
    )
    assert tokenizer.decode(record.token_ids, skip_special_tokens=False) == render
    n = len(record.token_ids)
    assert len(record.loss_mask) == len(record.logprobs) == n
    generated = []
    for k, turn in enumerate(record.turns):
        start, end = len(turn.prompt_ids), len(turn.prompt_ids) + len(turn.completion_ids)
        assert record.token_ids[:start] == turn.prompt_ids
        assert record.token_ids[start:end] == turn.completion_ids
        assert record.logprobs[start:end] == turn.logprobs
        generated += range(start, end)
        if k + 1 < len(record.turns):
            assert len(record.turns[k + 1].prompt_ids) > end  # the observation segment comes between
    assert [i for i, m in enumerate(record.loss_mask) if m] == generated
    assert sum(len(t.completion_ids) for t in record.turns) == sum(record.loss_mask)


async def test_multi_turn_tool_episode_is_token_exact(model):
    env = gym.make("claw/ToolCall-v0")
    policy = ScriptedPolicy(model, env.unwrapped.reference_action)
    try:
        record = await rollout_episode(env, policy, SamplingParams(max_new_tokens=200), seed=3, group_id="g")
    finally:
        env.close()
    tok = model.tokenizer
    assert [t.next_state.role for t in record.turns] == ["tool", "environment"]
    assert record.terminated and record.outcome == 1.0 and record.status == "ok"
    assert record.tools and "# Tools" in tok.decode(record.turns[0].prompt_ids)
    assert_token_exact(record, tok)
    answer = record.env_messages[3]["content"]
    assert f"<|im_start|>user\n<tool_response>\n{answer}\n</tool_response><|im_end|>" in tok.decode(record.token_ids)
    # The env stored the call in OpenAI form; the record keeps the text the policy generated.
    assert record.env_messages[2]["tool_calls"] and record.messages[2]["content"].startswith("<tool_call>")
    assert all(t.policy_version == 0 and t.finish_reason == "stop" for t in record.turns)
    assert check_drift(record, tok) == []

    tampered = copy.deepcopy(record)
    first_obs = len(record.turns[0].prompt_ids) + len(record.turns[0].completion_ids) + 2
    tampered.token_ids[first_obs] = (tampered.token_ids[first_obs] + 1) % len(tok)
    assert any("differ" in p for p in check_drift(tampered, tok))
    masked = copy.deepcopy(record)
    masked.loss_mask[3] = 1
    assert any("loss mask" in p for p in check_drift(masked, tok))
    shifted = copy.deepcopy(record)
    shifted.turns[1].prompt_ids = shifted.turns[1].prompt_ids[:-1]
    assert any("turn 1" in p for p in check_drift(shifted, tok))


async def test_generation_cut_mid_tool_call_goes_to_the_env_as_is(model):
    env = gym.make("claw/ToolCall-v0", max_turns=2)
    policy = ScriptedPolicy(model, env.unwrapped.reference_action)
    try:
        record = await rollout_episode(env, policy, SamplingParams(max_new_tokens=9), seed=1)
    finally:
        env.close()
    tok = model.tokenizer
    assert len(record.turns) == 2 and record.truncated
    for turn in record.turns:
        assert turn.finish_reason == "length" and len(turn.completion_ids) == 9
        assert turn.action_text.startswith("<tool_call>") and "</tool_call>" not in turn.action_text
        assert turn.next_state.evaluative.score == -1.0 and turn.next_state.directive
        end = len(turn.prompt_ids) + len(turn.completion_ids)
        assert record.token_ids[end] == model.eos_ids[0] and record.loss_mask[end] == 0  # closed, not trained on
    assert_token_exact(record, tok)
    assert check_drift(record, tok) == []


async def test_sampled_episode_with_the_real_model_decodes_to_its_transcript(model):
    env = gym.make("claw/ToolCall-v0", max_turns=3)
    try:
        record = await rollout_episode(env, model, SamplingParams(max_new_tokens=12, seed=2), seed=0)
    finally:
        env.close()
    assert len(record.turns) == 3
    assert_token_exact(record, model.tokenizer)
    for problem in check_drift(record, model.tokenizer):
        # An untrained model may emit a non-canonical tokenization of its own text; nothing else may differ.
        assert "generated span" in problem, problem


async def test_mismatched_history_and_tokenless_policies_are_refused(model):
    agent = EpisodeAgent(model, SamplingParams(max_new_tokens=2))
    info = {"messages": [{"role": "user", "content": "hi"}], "task_id": "t"}
    await agent(None, info)
    with pytest.raises(PolicyError, match="differs"):
        agent.observe(0.0, {"messages": [{"role": "user", "content": "changed"}, {"role": "assistant", "content": ""}]})

    class NoTokens(Policy):
        pass

    with pytest.raises(PolicyError, match="no tokenizer"):
        EpisodeAgent(NoTokens(), SamplingParams())


async def test_conversation_reply_cut_at_the_token_limit_is_not_a_valid_reply(model):
    env = gym.make("claw/Conversation-v0", max_turns=1)
    policy = ScriptedPolicy(model, env.unwrapped.reference_action)
    try:
        cut = await rollout_episode(env, policy, SamplingParams(max_new_tokens=12), seed=3)
        whole = await rollout_episode(env, policy, SamplingParams(max_new_tokens=400), seed=3)
    finally:
        env.close()
    assert cut.turns[0].finish_reason == "length" and whole.turns[0].finish_reason == "stop"
    assert cut.turns[0].next_state.evaluative.score == -1.0 and "cut off" in cut.turns[0].next_state.text
    assert cut.turns[0].reward == 0.0 and whole.turns[0].reward == 1.0  # the same reply, finished, meets them all
