"""Advantages: Binary RL, OPD, Combined and the general-agent step-index normalisation."""

import math

import numpy as np
import pytest

from claw_train.advantages import (
    StepReward,
    binary_advantages,
    combined_advantages,
    method_advantages,
    opd_advantages,
    step_index_normalise,
    step_reward,
)


def test_binary_is_the_score_on_every_token_without_group_normalisation():
    assert binary_advantages(1, 3) == [1.0, 1.0, 1.0]
    assert binary_advantages(-1, 2) == [-1.0, -1.0]
    # No group normalisation: a batch of all +1 stays +1 (GRPO would zero it).
    assert [binary_advantages(1, 1) for _ in range(4)] == [[1.0]] * 4


@pytest.mark.parametrize("score", [0, 0.0, None, float("nan")])
def test_binary_without_signal_is_masked(score):
    assert binary_advantages(score, 4) is None


def test_binary_with_no_tokens_is_masked():
    assert binary_advantages(1, 0) is None


def test_opd_is_teacher_minus_old_per_token():
    assert opd_advantages([-0.5, -2.0, -0.1], [-1.0, -1.0, -0.1]) == pytest.approx([0.5, -1.0, 0.0])


def test_opd_length_mismatch_is_a_clear_error():
    with pytest.raises(ValueError, match="teacher has 2"):
        opd_advantages([-1.0, -1.0], [-1.0])


def test_combined_weights_both_parts():
    adv = combined_advantages(2, score=1, teacher_logprobs=[-1.0, -3.0], old_logprobs=[-2.0, -2.0], w_rl=0.5, w_opd=2.0)
    assert adv == pytest.approx([0.5 + 2.0 * 1.0, 0.5 + 2.0 * -1.0])


def test_combined_defaults_are_one_and_one():
    adv = combined_advantages(2, score=-1, teacher_logprobs=[-1.0, -1.0], old_logprobs=[-1.5, -0.5])
    assert adv == pytest.approx([-1 + 0.5, -1 - 0.5])


def test_combined_with_only_a_score_or_only_a_hint_uses_what_it_has():
    assert combined_advantages(3, score=1) == [1.0, 1.0, 1.0]
    assert combined_advantages(2, score=0, teacher_logprobs=[-1.0, -2.0], old_logprobs=[-2.0, -2.0]) == [1.0, 0.0]
    assert combined_advantages(2, score=None, teacher_logprobs=[-1.0, -2.0], old_logprobs=[-2.0, -2.0]) == [1.0, 0.0]
    assert combined_advantages(2, score=0) is None
    assert combined_advantages(2) is None


def test_combined_rejects_a_teacher_of_the_wrong_length():
    with pytest.raises(ValueError, match="the completion 3"):
        combined_advantages(3, teacher_logprobs=[-1.0], old_logprobs=[-1.0])


def test_method_selects_the_parts():
    kw = {"score": 1.0, "teacher_logprobs": [-1.0, -1.0], "old_logprobs": [-2.0, -3.0]}
    assert method_advantages("binary", 2, **kw) == [1.0, 1.0]
    assert method_advantages("opd", 2, **kw) == [1.0, 2.0]
    assert method_advantages("combined", 2, **kw) == [2.0, 3.0]
    assert method_advantages("opd", 2, score=1.0, teacher_logprobs=None, old_logprobs=[-1, -1]) is None
    with pytest.raises(ValueError, match="unknown method"):
        method_advantages("ppo", 2, **kw)


def test_step_reward_adds_the_weighted_prm():
    assert step_reward(1.0, -1.0, c=0.5) == 0.5


def test_step_index_buckets_by_group_and_step():
    steps = [
        StepReward("g1", 1, outcome=1.0, prm=1.0),  # r=2
        StepReward("g1", 1, outcome=0.0, prm=0.0),  # r=0
        StepReward("g1", 2, outcome=1.0, prm=-1.0),  # r=0
        StepReward("g1", 2, outcome=0.0, prm=1.0),  # r=1
        StepReward("g1", 2, outcome=0.0, prm=-1.0),  # r=-1
        StepReward("g2", 1, outcome=1.0, prm=1.0),  # another group, same step: its own bucket
        StepReward("g2", 1, outcome=1.0, prm=0.0),
    ]
    out = step_index_normalise(steps)
    # bucket (g1, 1): r = [2, 0], μ=1, population σ=1
    assert out[0] == pytest.approx(1 / (1 + 1e-6))
    assert out[1] == pytest.approx(-1 / (1 + 1e-6))
    # bucket (g1, 2): r = [0, 1, -1], μ=0, σ=sqrt(2/3)
    sigma = math.sqrt(2 / 3)
    assert out[2:5] == pytest.approx([0.0, 1 / (sigma + 1e-6), -1 / (sigma + 1e-6)])
    # bucket (g2, 1): r = [2, 1]
    assert out[5:7] == pytest.approx([0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6)])
    # population σ, not sample σ
    assert np.std([0, 1, -1]) == pytest.approx(sigma)


def test_step_index_constant_buckets_are_dropped_and_single_buckets_raw():
    steps = [
        StepReward("a", 1, outcome=1.0, prm=1.0),
        StepReward("a", 1, outcome=1.0, prm=1.0),  # constant bucket of two: no gradient
        StepReward("a", 2, outcome=1.0, prm=0.5),  # alone at step 2: raw r
        StepReward("b", 3, outcome=-1.0, prm=0.0),  # alone: raw (negative) r
    ]
    assert step_index_normalise(steps, c=1.0) == [None, None, 1.5, -1.0]


def test_step_index_c_scales_the_prm_and_keeps_order():
    steps = [StepReward("a", 1, 0.0, 1.0), StepReward("a", 1, 0.0, -1.0)]
    assert step_index_normalise(steps, c=0.0) == [None, None]
    out = step_index_normalise(list(reversed(steps)), c=2.0)
    assert out[0] < 0 < out[1]


def test_step_index_of_nothing_is_nothing():
    assert step_index_normalise([]) == []
