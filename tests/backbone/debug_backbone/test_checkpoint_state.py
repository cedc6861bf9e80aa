"""trainer_state.pt: what `--resume` reads back is tensors and plain values only; the RNG states round-trip."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch

from astuner.errors import UserError
from astuner.backbone.debug.checkpoint import load_trainer_state, restore_rng, rng_state


class Planted:
    """What code running inside an agent's sandbox could leave in a run folder."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


def test_a_planted_trainer_state_is_refused_not_run(tmp_path):
    marker = tmp_path / "planted_code_ran"
    torch.save({"optimizer": {}, "rng": Planted(marker)}, tmp_path / "trainer_state.pt")
    with pytest.raises(UserError, match="holds more than tensors and plain values, so it is not loaded"):
        load_trainer_state(tmp_path)
    assert not marker.exists()


def test_rng_states_round_trip_through_a_safe_load(tmp_path):
    state = rng_state()
    torch.save({"rng": state}, tmp_path / "trainer_state.pt")
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    restore_rng(load_trainer_state(tmp_path)["rng"])
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected


def test_resume_takes_the_newest_complete_checkpoint(tmp_path):
    from astuner.backbone.debug.checkpoint import latest_checkpoint, list_checkpoints

    for step, complete in ((2, True), (9, True), (10, True), (12, False)):
        folder = tmp_path / f"global_step_{step}"
        folder.mkdir()
        if complete:
            (folder / "COMPLETE").write_text(str(step))
    (tmp_path / "global_step_x").mkdir()
    assert [step for step, _ in list_checkpoints(tmp_path)] == [2, 9, 10]  # by number, not by name
    assert latest_checkpoint(tmp_path) == tmp_path / "global_step_10"  # 12 was cut short
