"""Several policies on Trinity as LoRA adapters of one base: the pieces of logic, each on its own (the run itself:
test_trinity_e2e.py::test_the_signal_game_trains_two_policies_as_adapters_on_trinity)."""

from __future__ import annotations

import pytest

pytest.importorskip("trinity")

from vllm.lora.request import LoRARequest  # noqa: E402

from astuner.backbone.trinity.engine import policy_request  # noqa: E402
from astuner.backbone.trinity.lora_policies import adapter_of, padded_rows, policy_rows  # noqa: E402


def test_each_policy_asks_for_its_adapter_of_the_step_trinity_synced():
    learners = ["hinter", "guesser"]
    synced = LoRARequest(lora_name="astuner_lora", lora_int_id=1,
                         lora_path="/ckpt/job/global_step_3/actor/lora_adapter")
    hinter, guesser = (policy_request(synced, p, learners) for p in learners)
    assert hinter.lora_path == "/ckpt/job/global_step_3/actor/lora_adapter/hinter"
    assert guesser.lora_path == "/ckpt/job/global_step_3/actor/lora_adapter/guesser"
    # ids: unique per (step, policy), never Trinity's own 1, the same in every process
    assert (hinter.lora_int_id, guesser.lora_int_id) == (2 + 3 * 2, 2 + 3 * 2 + 1)
    later = LoRARequest(lora_name="astuner_lora", lora_int_id=1, lora_path="/ckpt/job/global_step_4/actor/lora_adapter")
    assert policy_request(later, "hinter", learners).lora_int_id == 10
    # before any step: Trinity's untrained adapter serves every policy (each starts as the base model)
    dummy = LoRARequest(lora_name="astuner_lora", lora_int_id=1, lora_path="/ckpt/job/dummy_lora")
    first = policy_request(dummy, "guesser", learners)
    assert first.lora_path == "/ckpt/job/dummy_lora" and first.lora_int_id == 3


def test_a_batch_splits_by_the_policy_each_experience_names():
    uids = ["0/t1/hinter/0/0/hinter", "0/t1/guesser/0/1/guesser", "0/astuner-padding/0/0/1f3a",
            "0/t2/hinter/1/0/hinter"]
    assert policy_rows(uids, ["hinter", "guesser"]) == {"hinter": [0, 3], "guesser": [1]}
    assert policy_rows(uids, ["guesser", "other"]) == {"guesser": [1], "other": []}


def test_a_policys_rows_pad_to_the_data_parallel_size():
    assert padded_rows([4, 7, 9], 1) == ([4, 7, 9], 0)
    assert padded_rows([4, 7, 9], 2) == ([4, 7, 9, 4], 1)
    assert padded_rows([4, 7, 9], 8) == ([4, 7, 9, 4, 7, 9, 4, 7], 5)


def test_adapter_parameters_are_told_apart_by_name():
    assert adapter_of("base_model.model.model.layers.0.self_attn.q_proj.lora_A.hinter.weight") == "hinter"
    assert adapter_of("base_model.model.model.layers.0.mlp.up_proj.lora_B.default.weight") == "default"
    assert adapter_of("base_model.model.model.embed_tokens.lora_embedding_A.guesser") == "guesser"
    assert adapter_of("base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight") is None


def test_a_failed_episode_leaves_every_group_of_its_task_short():
    """With several policies a task has a group per policy (`<task>/<policy>`); the one marker a failed episode
    hands Trinity makes all of them short, so `short_group: drop` drops each, and no other task's."""
    from trinity.common.experience import EID, Experience

    from astuner.backbone.trinity.operators import FAILED, TASK, ShortGroups

    def exp(task, info, batch=0):
        return Experience(eid=EID(batch=batch, task=task), tokens=[0, 0], prompt_length=1, logprobs=[0.0],
                          action_mask=[True], reward=1.0, info=info)

    marker = exp(7, {FAILED: True})  # Trinity's runner names the task of a marker: its own task id
    kept = [exp(f"7/{p}", {TASK: "7"}) for p in ("hinter", "guesser")]
    other = [exp(f"8/{p}", {TASK: "8"}) for p in ("hinter", "guesser")] + [exp("7/hinter", {TASK: "7"}, batch=1)]
    out, metrics = ShortGroups(drop=True).process([marker, *kept, *other])
    assert out == other and metrics == {"short_groups": 1, "dropped_short_groups": 1}
    out, _ = ShortGroups(drop=False).process([marker, *kept, *other])
    assert out == kept + other


def test_mask_rows_leaves_the_padding_rows_without_loss():
    import torch
    from verl import DataProto

    from astuner.backbone.trinity.lora_policies import mask_rows

    batch = DataProto.from_dict({"response_mask": torch.ones(4, 3, dtype=torch.long)})
    mask_rows(batch, 0)
    assert int(batch.batch["response_mask"].sum()) == 12
    mask_rows(batch, 1)
    assert batch.batch["response_mask"].tolist() == [[1, 1, 1]] * 3 + [[0, 0, 0]]


def test_an_experiences_group_is_its_policys_or_its_agents():
    from types import SimpleNamespace

    from astuner.backbone.trinity.workflow import group_of

    def cfg(policies, by):
        return SimpleNamespace(policies=policies, trainer_common=SimpleNamespace(algorithm=SimpleNamespace(
            adv_group=by)))

    wolf = SimpleNamespace(policy="wolves", agent="wolf_2")
    assert group_of(cfg({"wolves": {}}, "task"), "12", wolf) == ("12/wolves", "wolves")
    assert group_of(cfg({"wolves": {}}, "agent"), "12", wolf) == ("12/wolves/wolf_2", "wolves")
    assert group_of(cfg({}, "agent"), "12", wolf) == ("12//wolf_2", "")  # one policy, a group per agent
    assert group_of(cfg({}, "task"), "12", wolf) == ("", "")  # Trinity's own grouping


def test_the_engine_gets_a_slot_per_adapter():
    """Trinity's validator sizes vLLM's `max_loras` from its one `lora_configs` entry: one slot per learning policy
    plus Trinity's own adapter (re-added at each weight sync), so a batch mixing every policy's calls is served."""
    from types import SimpleNamespace

    from astuner.backbone.trinity.lora_policies import widen_lora_slots

    config = SimpleNamespace(explorer=SimpleNamespace(rollout_model=SimpleNamespace(
        lora_kwargs={"max_loras": 1, "max_lora_rank": 8})))
    widen_lora_slots(config, [])
    assert config.explorer.rollout_model.lora_kwargs["max_loras"] == 1
    widen_lora_slots(config, ["hinter", "guesser"])
    assert config.explorer.rollout_model.lora_kwargs == {"max_loras": 3, "max_lora_rank": 8}
