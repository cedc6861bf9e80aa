"""Task selectors: order, epochs, state round-trips; BOTS against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from astuner.data.bots import BetaPassRateEstimator, select
from astuner.data.selector import build_selector
from astuner.schema import Task


def tasks(n=6):
    return [Task(task_id=f"t{i}", main_query=f"q{i}", metadata={"easy": float(i % 3), "weak": i / 10,
                                                               "strong": min(1.0, i / 10 + 0.3)}) for i in range(n)]


def ids(batch):
    return [t.task_id for t in batch]


def test_sequential_and_shuffle_epochs():
    seq = build_selector("sequential", tasks(5), 0)
    assert [ids(seq.next_batch(2)) for _ in range(4)] == [["t0", "t1"], ["t2", "t3"], ["t4"], ["t0", "t1"]]
    assert seq.epoch == 1
    shuffle = build_selector("shuffle", tasks(6), 3)
    first = ids(shuffle.next_batch(6))
    second = ids(shuffle.next_batch(6))
    assert sorted(first) == sorted(second) == [f"t{i}" for i in range(6)] and first != second


def test_random_draws_with_replacement_reproducibly():
    a, b = build_selector("random", tasks(4), 1), build_selector("random", tasks(4), 1)
    draws = [ids(a.next_batch(8)) for _ in range(3)]
    assert draws == [ids(b.next_batch(8)) for _ in range(3)]
    assert any(len(set(d)) < len(d) for d in draws)  # with replacement


def test_offline_easy2hard_orders_by_features():
    sel = build_selector("offline_easy2hard", tasks(6), 0, ["easy"])
    assert ids(sel.next_batch(6)) == ["t2", "t5", "t1", "t4", "t0", "t3"]
    with pytest.raises(ValueError, match="no numeric feature 'missing'"):
        build_selector("offline_easy2hard", tasks(3), 0, ["missing"])


@pytest.mark.parametrize("kind,keys,kwargs", [("sequential", [], {}), ("shuffle", [], {}), ("random", [], {}),
                                             ("offline_easy2hard", ["easy"], {}),
                                             ("difficulty_based", ["weak", "strong"], {"tau": 0.5, "m": 4})])
def test_state_round_trip_continues_identically(kind, keys, kwargs):
    a = build_selector(kind, tasks(7), 5, keys, kwargs)
    for _ in range(3):
        batch = a.next_batch(3)
        a.feedback({t.task_id: 0.5 for t in batch})
    state = a.state_dict()
    b = build_selector(kind, tasks(7), 5, keys, kwargs)
    b.load_state_dict(state)
    for _ in range(4):
        x, y = a.next_batch(3), b.next_batch(3)
        assert ids(x) == ids(y)
        a.feedback({t.task_id: 1.0 for t in x})
        b.feedback({t.task_id: 1.0 for t in y})


def test_bots_update_hand_computed():
    est = BetaPassRateEstimator(weak=[0.0, 0.2, 0.4], strong=[0.5, 0.6, 1.0], m=4, lamb=0.5, rho=0.25)
    est.update([0], [0.5])
    # capability from the batch: (0.5 - 0.0) / (0.5 - 0.0 + 1e-6) ~ 1.0 -> implicit p~ = strong, except p~_0 = 0.5
    cap = 0.5 / (0.5 + 1e-6)
    implicit = np.clip(np.array([0.0, 0.2, 0.4]) + cap * np.array([0.5, 0.4, 0.6]), 0, 1)
    implicit[0] = 0.5
    s = np.array([2.0, 0, 0])
    f = np.array([2.0, 0, 0])
    alpha = 0.5 * 1 + 0.5 + 0.75 * s + 0.25 * 4 * implicit
    beta = 0.5 * 1 + 0.5 + 0.75 * f + 0.25 * 4 * (1 - implicit)
    assert est.alphas == pytest.approx(alpha) and est.betas == pytest.approx(beta)
    assert est.cap == pytest.approx(cap)
    est.update([2], [1.0])  # the capability estimate is smoothed: 0.9 old + 0.1 new
    new_cap = (1.0 - 0.4) / (1.0 - 0.4 + 1e-6)
    assert est.cap == pytest.approx(0.9 * cap + 0.1 * new_cap)


def test_bots_selection_prefers_tasks_near_the_target():
    scores = -np.abs(0.5 - np.array([0.1, 0.45, 0.9, 0.55]))
    assert select(scores, 2, 0.0, np.random.default_rng(0)) == [1, 3]
    draws = [tuple(sorted(select(scores, 2, 0.05, np.random.default_rng(s)))) for s in range(50)]
    assert draws.count((1, 3)) > 40  # a low temperature concentrates on the best


def test_difficulty_based_selector_learns_from_feedback():
    sel = build_selector("difficulty_based", tasks(6), 0, ["weak", "strong"],
                         {"target_reward": 0.5, "tau": 0, "m": 8, "lamb": 0.1, "rho": 0.1})
    first = ids(sel.next_batch(2))
    sel.feedback({first[0]: 1.0, first[1]: 1.0})  # too easy now
    assert not set(ids(sel.next_batch(2))) & set(first)
    with pytest.raises(ValueError, match="exactly two feature_keys"):
        build_selector("difficulty_based", tasks(3), 0, ["weak"])
