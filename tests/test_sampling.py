"""The in-process policy's batched sampler: each row's own temperature, top-k, top-p and generator."""

from __future__ import annotations

import math

import torch

from claw_train.policy import SamplingParams
from claw_train.policy.sampling import row_generator, sample_rows

PROBS = torch.tensor([0.1, 0.2, 0.3, 0.4])
LOGITS = PROBS.log()


def draw(n: int, sampling: SamplingParams, seed: int = 0) -> list[int]:
    shared = torch.Generator().manual_seed(seed)
    tokens, _ = sample_rows(LOGITS.expand(n, -1), [sampling] * n, [shared] * n)
    return tokens


def test_rows_follow_their_distribution():
    n = 20_000
    counts = torch.bincount(torch.tensor(draw(n, SamplingParams(temperature=1.0))), minlength=4).double()
    sigma = (n * PROBS * (1 - PROBS)).sqrt()
    assert bool(((counts - n * PROBS).abs() < 4 * sigma).all()), counts  # 4 sigma: fixed seed, fails if biased
    hot = torch.bincount(torch.tensor(draw(n, SamplingParams(temperature=0.5))), minlength=4).double() / n
    assert abs(hot[3] - 0.16 / 0.30) < 0.02  # p^2 normalised: 0.16 / (0.01 + 0.04 + 0.09 + 0.16)


def test_top_k_and_top_p_restrict_each_row_and_log_probs_stay_unfiltered():
    assert set(draw(2000, SamplingParams(temperature=1.0, top_k=2))) == {2, 3}
    assert set(draw(2000, SamplingParams(temperature=1.0, top_p=0.5))) == {2, 3}  # 0.4 then 0.3 reach 0.5
    assert set(draw(500, SamplingParams(temperature=1.0, top_p=0.4))) == {3}
    rows = [SamplingParams(temperature=0.5, top_k=1), SamplingParams(temperature=1.0), SamplingParams(temperature=0.0)]
    gens = [torch.Generator().manual_seed(i) for i in range(3)]
    tokens, logprobs = sample_rows(LOGITS.expand(3, -1), rows, gens)
    assert tokens[0] == 3 and tokens[2] == 3  # top-k 1 and greedy both take the most likely token
    assert math.isclose(logprobs[0], math.log(0.16 / 0.30), rel_tol=1e-5)  # scaled, not renormalised by top-k
    assert math.isclose(logprobs[1], math.log(PROBS[tokens[1]]), rel_tol=1e-5)
    assert math.isclose(logprobs[2], math.log(0.4), rel_tol=1e-5)


def test_a_seeded_row_samples_the_same_tokens_whatever_shares_its_batch():
    vocab = torch.randn(5, 1000, generator=torch.Generator().manual_seed(0))
    mine = SamplingParams(temperature=1.0, top_p=0.9, seed=7)
    others = [SamplingParams(temperature=t, top_k=k) for t, k in ((0.3, 5), (1.0, 0), (0.0, 0), (2.0, 50))]

    batch = [others[0], others[1], mine, others[2], others[3]]
    shared = torch.Generator().manual_seed(99)
    together = sample_rows(vocab, batch, [row_generator(s.seed, shared) for s in batch])[0][2]
    alone = [sample_rows(vocab[2:3], [mine], [row_generator(7, None)])[0][0] for _ in range(2)]
    assert alone == [together] * 2
