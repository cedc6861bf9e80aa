"""pass@k against its closed form, and the bootstrap intervals' coverage on a synthetic judge."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from astuner.evaluate.stats import interval, ks_reported, pass_at_k


def enumerated_pass_at_k(n: int, c: int, k: int) -> float:
    """The share of the k-subsets of n episodes (c successes) holding a success: the definition, counted."""
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(outcomes[i] for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_pass_at_k_equals_the_share_of_k_subsets_with_a_success(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(enumerated_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_closed_forms_and_refusals():
    # the numerically stable product form of 1 - C(n-c, k) / C(n, k)
    for n, c, k in [(20, 3, 5), (100, 1, 10), (64, 30, 16)]:
        product = math.prod(1 - k / i for i in range(n - c + 1, n + 1))
        assert pass_at_k(n, c, k) == pytest.approx(1 - product, rel=1e-12)
    assert pass_at_k(10, 4, 1) == pytest.approx(0.4)  # pass@1 is the success rate
    assert pass_at_k(4, 4, 2) == 1.0 and pass_at_k(4, 0, 4) == 0.0
    for bad in [(3, 4, 1), (3, 1, 0), (3, 1, 4), (3, -1, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(*bad)
    assert ks_reported(1) == [1] and ks_reported(4) == [1, 2, 4] and ks_reported(6) == [1, 2, 4, 6]


def synthetic_run(rng: random.Random, tasks: int, k: int) -> tuple[list[float], float]:
    """A judge on `tasks` tasks of Beta-distributed difficulty, k Bernoulli episodes each: per-task mean rewards,
    and the population mean they estimate."""
    a, b = 2.0, 3.0
    means = []
    for _ in range(tasks):
        p = rng.betavariate(a, b)
        means.append(sum(rng.random() < p for _ in range(k)) / k)
    return means, a / (a + b)


def test_the_interval_covers_the_true_mean_about_95_times_in_100():
    rng = random.Random(7)
    trials, covered = 300, 0
    for trial in range(trials):
        values, truth = synthetic_run(rng, tasks=40, k=4)
        low, high = interval(values, seed=trial)
        assert low <= sum(values) / len(values) <= high
        covered += low <= truth <= high
    # 95% nominal; with 300 trials the binomial spread is about ±0.013
    assert 0.91 <= covered / trials <= 0.985, covered / trials


def test_a_paired_difference_covers_the_true_shift_and_separates_a_real_gain():
    rng = random.Random(11)
    trials, covered, separated = 200, 0, 0
    for trial in range(trials):
        # the same tasks (difficulties) for both models: B is A with every task's success chance raised by 0.2,
        # except where it would pass 1 (the truth below computes it exactly from the drawn difficulties)
        difficulties = [rng.betavariate(2.0, 3.0) for _ in range(40)]
        a = [sum(rng.random() < p for _ in range(4)) / 4 for p in difficulties]
        b = [sum(rng.random() < min(1.0, p + 0.2) for _ in range(4)) / 4 for p in difficulties]
        truth = sum(min(1.0, p + 0.2) - p for p in difficulties) / len(difficulties)
        low, high = interval(b, seed=trial, paired_with=a)
        covered += low <= truth <= high
        separated += low > 0
    assert 0.9 <= covered / trials <= 0.99, covered / trials
    # a gain of about 0.2 on 40 tasks x 4 episodes (a per-task spread near 0.33: about 3.7 standard errors)
    assert separated / trials > 0.9, separated / trials


def test_an_interval_without_spread_is_its_value():
    assert interval([0.5, 0.5, 0.5]) == (0.5, 0.5)
    assert interval([1.0]) == (1.0, 1.0)
    assert interval([1.0, 1.0], paired_with=[0.0, 0.0]) == (1.0, 1.0)
    with pytest.raises(ValueError):
        interval([])
