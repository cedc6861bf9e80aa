"""Several policies in one debug run (astuner.policies): the signal game's hinter and guesser each learn their own
policy next to a frozen noise agent; the frozen weights stay bit-identical and get no optimizer or checkpoint; a
resumed run is the uninterrupted one, bit for bit; mistakes in the map exit 2 at --dry-run naming the key."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import REPO_ROOT, run_cli

CONF = "tutorial/example_multi_agent_cpu/signal_game.yaml"


@pytest.fixture
def game(tmp_path, monkeypatch):
    """The multi-agent tutorial in a temp folder, the working folder (its tiny model is created there)."""
    shutil.copytree(REPO_ROOT / "tutorial" / "example_multi_agent_cpu",
                    tmp_path / "tutorial" / "example_multi_agent_cpu")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def trainers(monkeypatch):
    """The DebugTrainer of each run, kept for inspection after it ends."""
    from astuner.backbone.debug.loop import DebugTrainer

    kept = []
    original = DebugTrainer.__init__

    def init(self, ctx):
        original(self, ctx)
        kept.append(self)

    monkeypatch.setattr(DebugTrainer, "__init__", init)
    return kept


def rows(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]


def args(steps, *extra):
    return ["--conf", CONF, f"astuner.trainer_common.total_training_steps={steps}", *extra]


def weights(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_two_policies_learn_and_the_frozen_one_stays_bit_identical(game, trainers, capsys):
    from transformers import AutoModelForCausalLM

    code, _, err = run_cli(args(300, "astuner.trainer_common.test_freq=-1", "astuner.trainer_common.save_freq=-1",
                                "astuner.trainer_common.val_before_train=false"), capsys)
    assert code == 0, err[-3000:]
    root = game / "launcher_record" / "signal_game"
    history = [r for r in rows(root) if r["step"] > 0]
    assert len(history) == 300
    for policy, gain in (("hinter", 0.5), ("guesser", 0.2)):
        series = [r[f"policy/{policy}/reward/mean"] for r in history]
        early, late = statistics.fmean(series[:30]), statistics.fmean(series[-30:])
        assert late > early + gain, (policy, early, late)
        # its own optimizer: a step per step that left it a group with different rewards
        steps = [r[f"policy/{policy}/actor/optimizer_steps"] for r in history if f"policy/{policy}/actor/lr" in r]
        assert steps == list(range(1, len(steps) + 1)) and len(steps) > 100, (policy, len(steps))
    assert not any(k.startswith("policy/noise/") for r in history for k in r)  # the frozen one is not trained
    team = [r["workflow/team_success"] for r in history]
    assert statistics.fmean(team[-30:]) > statistics.fmean(team[:30]) + 0.2

    trainer = trainers[-1]
    noise = trainer.learner.slots["noise"]
    assert noise.trainer is None and not any(p.requires_grad or p.grad is not None for p in noise.model.parameters())
    base = AutoModelForCausalLM.from_pretrained(trainer.model_path, dtype=torch.float32).state_dict()
    after = noise.model.state_dict()
    assert after.keys() == base.keys() and all(torch.equal(after[k], base[k]) for k in base)
    moved = trainer.learner.slots["hinter"].model.state_dict()
    assert any(not torch.equal(moved[k], base[k]) for k in base)  # a learner's weights did move

    checkpoint = root / "checkpoints" / "global_step_300"
    assert sorted(p.name for p in (checkpoint / "policies").iterdir()) == ["guesser", "hinter"]
    assert not (checkpoint / "model").exists()
    state = torch.load(checkpoint / "trainer_state.pt", weights_only=True)
    assert sorted(state["policies"]) == ["guesser", "hinter"] and sorted(state["rng"]["engines"]) == [
        "guesser", "hinter", "noise"]

    # each episode's agents with their policies and rewards, for the viewer
    episode = json.loads((root / "trajectories" / "step_300.jsonl").read_text().splitlines()[0])
    assert episode["policies"] == {"hinter": "hinter", "noise": "noise", "guesser": "guesser"}
    assert set(episode["rewards"]) == {"hinter", "guesser"}
    assert {s["agent"] for s in episode["samples"]} == {"hinter", "guesser"}  # the frozen agent's call is not one


SHARED_LORA = ("astuner.model.lora={rank: 16, alpha: 32, target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, "
               "up_proj, down_proj, lm_head]}")


@pytest.mark.parametrize("lora", [[], [SHARED_LORA]], ids=["own-models", "adapters-on-one-base"])
def test_a_resumed_run_is_the_uninterrupted_one_for_every_policy(game, capsys, lora):
    def own_settings(a):  # different settings per policy: each optimizer state must come back as its own
        a["policies"]["guesser"] = {"optim": {"lr": 3.0e-3}}
        a["policies"]["hinter"] = {"algorithm": {"clip_ratio_high": 0.28}}

    conf = edited(game, own_settings)
    small = ["astuner.data.train_batch_size=4", "astuner.rollout.num_repeat=4", "astuner.trainer_common.test_freq=-1",
             "astuner.trainer_common.val_before_train=false", "astuner.trainer_common.save_freq=2",
             "astuner.trainer_common.algorithm.drop_zero_variance_groups=false", *lora]

    def args(steps, *extra):
        return ["--conf", conf, f"astuner.trainer_common.total_training_steps={steps}", *extra]

    code, _, err = run_cli(args(6, *small, "astuner.experiment_name=straight"), capsys)
    assert code == 0, err[-3000:]
    assert run_cli(args(3, *small, "astuner.experiment_name=split"), capsys)[0] == 0
    code, _, err = run_cli(args(6, *small, "astuner.experiment_name=split") + ["--resume"], capsys)
    assert code == 0 and "resumed from" in err, err[-3000:]

    def final(name, policy):
        from safetensors.torch import load_file

        folder = game / "launcher_record" / name / "checkpoints" / "global_step_6" / "policies" / policy
        return load_file(str(folder / ("adapter_model.safetensors" if lora else "model.safetensors")))

    for policy in ("hinter", "guesser"):
        straight, resumed = final("straight", policy), final("split", policy)
        assert straight.keys() == resumed.keys() and all(torch.equal(straight[k], resumed[k]) for k in straight)

    # resumed with another set of policies, or without policies: one line naming what the checkpoint holds
    def renamed(a):
        a["policies"]["seeker"] = a["policies"].pop("guesser")
        a["rollout"]["agent_policy"]["guesser"] = "seeker"

    other = edited(game, renamed)
    split = game / "launcher_record" / "split"
    before = {p.relative_to(split): p.read_bytes() for p in split.rglob("*") if p.is_file()}
    code, _, err = run_cli(["--conf", other, "astuner.experiment_name=split", "astuner.trainer_common.total_training_steps=8",
                            *small, "--resume"], capsys)
    assert code == 2 and "holds no weights of policy 'seeker' (policies/seeker/)" in err, err[-2000:]
    single = edited(game, lambda a: [a.pop("policies"), a["rollout"].pop("agent_policy")])
    code, _, err = run_cli(["--conf", single, "astuner.experiment_name=split",
                            "astuner.trainer_common.total_training_steps=8", *small, "--resume"], capsys)
    assert code == 2 and "was saved by a run with astuner.policies" in err, err[-2000:]
    assert {p.relative_to(split): p.read_bytes() for p in split.rglob("*") if p.is_file()} == before  # untouched
    timing = ("perf/", "timing")

    def trained(name):
        return [{k: v for k, v in r.items() if not k.startswith(timing)}
                for r in rows(game / "launcher_record" / name)]

    assert trained("straight") == trained("split")
    assert trained("straight")[-1]["policy/guesser/actor/lr"] == 3.0e-3


def edited(game: Path, change) -> str:
    path = game / CONF
    config = yaml.safe_load(path.read_text())
    change(config["astuner"])
    out = path.with_name("edited.yaml")
    out.write_text(yaml.safe_dump(config))
    return str(out.relative_to(game))


@pytest.mark.parametrize("change, key, fragment", [
    (lambda a: a["rollout"]["agent_policy"].update(guesser="guessr"), "astuner.rollout.agent_policy.guesser",
     "unknown policy 'guessr'"),
    (lambda a: a["rollout"]["agent_policy"].update({"*er": "noise"}), "astuner.rollout.agent_policy.*er",
     "both match one agent"),
    (lambda a: a["rollout"]["agent_policy"].update({"player_*": "guesser", "p*_[0-9]": "hinter"}),
     "astuner.rollout.agent_policy.player_*", "'p*_[0-9]' and 'player_*' both match one agent"),
    (lambda a: a["rollout"]["agent_policy"].pop("guesser"), "astuner.policies.guesser",
     "is trainable but no astuner.rollout.agent_policy entry uses it"),
    (lambda a: a["rollout"].pop("agent_policy"), "astuner.rollout.agent_policy", "agent_policy is empty"),
    (lambda a: a["rollout"].update(trainable_targets=["hinter"]), "astuner.rollout.trainable_targets",
     "map agents in astuner.rollout.agent_policy"),
    (lambda a: a["rollout"].update(engine="vllm"), "astuner.policies", "set astuner.rollout.engine: hf"),
    (lambda a: [p.update(trainable=False) for p in [a["policies"]["hinter"], a["policies"]["guesser"]]],
     "astuner.policies", "every policy is frozen"),
    (lambda a: a.update(policies={"__base__": {"trainable": False}, **a["policies"]}, model={**a["model"], "lora": {"rank": 4}}),
     "astuner.policies.__base__", "peft's name for 'no adapter'"),
    (lambda a: a["policies"].update(train={"lora": {"rank": 4}, "trainable": False}), "astuner.policies.train",
     "where it is the name of a method"),
    # issue 38: accepted, and another policy's saved adapter lost its lora_A tensors (or held every adapter's)
    (lambda a: a.update(policies={"lora_A": {"trainable": False}, **a["policies"]}, model={**a["model"], "lora": {}}),
     "astuner.policies.lora_A", "found by '.lora_A.' in weight names, which is part of peft's own names"),
    (lambda a: a.update(policies={"model": {"trainable": False}, **a["policies"]}, model={**a["model"], "lora": {}}),
     "astuner.policies.model", "found by '.model.' in weight names"),
    (lambda a: a["policies"].update({"0": {"lora": {"rank": 4}, "trainable": False}}), "astuner.policies.0",
     "numbers a layer there"),
    (lambda a: a["policies"]["noise"].update(path="no/such/model"), "astuner.policies.noise.path",
     "no model folder 'no/such/model'"),
])
def test_map_mistakes_exit_2_at_dry_run_naming_the_key(game, capsys, change, key, fragment):
    code, out, err = run_cli(["--conf", edited(game, change), "--dry-run"], capsys)
    assert code == 2 and fragment in err and key in err, err
    assert all(line.startswith("astuner: error: ") or "edited.yaml" in line for line in err.strip().splitlines())


def test_a_lora_policy_named_after_a_part_of_its_base_models_weights_is_refused_at_dry_run(game, capsys):
    """The base model's own parameter names, read from its safetensors without loading it: a policy named 'mixer'
    is refused on a model whose weights are backbone.blocks.0.mixer..., and taken on the tutorial's."""
    from safetensors.torch import save_file

    model = game / "models" / "blocks"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    (model / "tokenizer.json").write_text("{}")
    save_file({f"backbone.blocks.{i}.mixer.{p}.weight": torch.zeros(2, 2)
               for i in range(2) for p in ("in_proj", "out_proj")}
              | {"backbone.embeddings.weight": torch.zeros(4, 2)}, str(model / "model.safetensors"))
    lora = {"rank": 4}

    def named_mixer(a, path=None):
        a["policies"]["mixer"] = {"trainable": False, "lora": lora, **({"path": path} if path else {})}

    code, _, err = run_cli(["--conf", edited(game, lambda a: named_mixer(a, str(model))), "--dry-run"], capsys)
    assert code == 2 and "astuner.policies.mixer: this LoRA policy's peft adapter is found by '.mixer.'" in err, err
    assert "is part of the base model's names (backbone.blocks.0.mixer.in_proj.weight)" in err
    code, _, err = run_cli(["--conf", edited(game, named_mixer), "--dry-run"], capsys)
    assert code == 0, err


def test_the_run_checks_the_loaded_base_models_own_names(game, capsys, monkeypatch):
    """Where the dry run could not read the base model's names (a hub model not downloaded), the run checks the
    loaded model's before it adds an adapter."""
    from astuner.backbone.debug import policies
    from astuner.model import weight_names

    monkeypatch.setattr(policies, "COMMON_PARTS", ())
    monkeypatch.setattr(weight_names, "weight_names", lambda folder: None)
    conf = edited(game, lambda a: a["policies"].update(self_attn={"trainable": False}) or a["model"].update(lora={}))
    code, _, err = run_cli(["--conf", conf, "--dry-run"], capsys)
    assert code == 0, err  # nothing to check it against here
    code, _, err = run_cli(["--conf", conf, "astuner.trainer_common.total_training_steps=1"], capsys)
    errors = [line for line in err.splitlines() if line.startswith("astuner: error: ")]
    assert code == 2 and len(errors) == 1, err[-3000:]
    assert "astuner.policies.self_attn" in errors[0] and "(model.layers.0.self_attn" in errors[0]
    assert not list((game / "launcher_record" / "edited" / "checkpoints").glob("global_step_*"))


def test_dry_run_prints_the_map_and_other_backbones_refuse_several_policies(game, capsys):
    code, out, err = run_cli(["--conf", CONF, "--dry-run"], capsys)
    assert code == 0, err
    assert ("policies: policy hinter (trainable): hinter; policy guesser (trainable): guesser; policy noise "
            "(frozen): noise*") in out + err
    for backbone, says in (("verl", "verl 0.9 trains one actor model per job"),
                           # on Trinity the policies are LoRA adapters of one base (test_trinity_policies.py)
                           ("trinity", "each learning policy is a LoRA adapter of astuner.model")):
        code, out, err = run_cli(["--conf", CONF, "--dry-run", "--backbone", backbone], capsys)
        assert code == 2 and says in err and "--backbone debug" in err, err


def test_lora_policies_share_one_base_and_each_samples_with_its_own_adapter(game, trainers, monkeypatch, capsys):
    from astuner.backbone.debug import lora
    from astuner.backbone.debug.loop import DebugTrainer

    at_start = {}
    setup = DebugTrainer._setup

    def remember(self):
        setup(self)
        at_start.update({k: v.detach().clone() for k, v in self.learner.slots["noise"].model.named_parameters()
                         if ".noise." in k})

    monkeypatch.setattr(DebugTrainer, "_setup", remember)
    code, _, err = run_cli(args(150, SHARED_LORA, "astuner.trainer_common.optim.lr=1.5e-3",
                                "astuner.trainer_common.test_freq=-1", "astuner.trainer_common.val_before_train=false",
                                "astuner.trainer_common.save_freq=-1"), capsys)
    assert code == 0, err[-3000:]
    trainer = trainers[-1]
    models = {id(slot.model) for slot in trainer.learner.slots.values()}
    assert len(models) == 1  # one base in memory: every policy is an adapter of one peft model
    model = trainer.learner.slots["hinter"].model
    assert sorted(model.peft_config) == ["guesser", "hinter", "noise"]
    from transformers import AutoModelForCausalLM

    one = AutoModelForCausalLM.from_pretrained(trainer.model_path).num_parameters()
    assert sum(p.numel() for k, p in model.named_parameters() if "lora_" not in k) == one
    # the frozen adapter: no gradient, bit-identical
    noise = {k: v for k, v in model.named_parameters() if ".noise." in k}
    assert noise.keys() == at_start.keys() and noise
    assert all(torch.equal(noise[k], at_start[k]) and not noise[k].requires_grad for k in noise)
    history = [r for r in rows(game / "launcher_record" / "signal_game") if r["step"] > 0]
    for policy, gain in (("hinter", 0.3), ("guesser", 0.1)):  # measured: +0.14 for the guesser (per-episode seeds)
        series = [r[f"policy/{policy}/reward/mean"] for r in history]
        assert statistics.fmean(series[-30:]) > statistics.fmean(series[:30]) + gain, policy
        # the engine sampled each call with its policy's adapter: its log-probs are the trainer's
        diffs = [r[f"policy/{policy}/actor/rollout_logprob_diff"] for r in history
                 if f"policy/{policy}/actor/rollout_logprob_diff" in r]
        assert diffs and max(diffs) < 1e-5, (policy, max(diffs))
        assert len(lora.adapter_parameters(model, policy)) > 0


def test_a_policy_without_a_path_takes_its_own_lora(game, trainers, capsys):
    conf = edited(game, lambda a: a["policies"].update(hinter={"lora": {"rank": 4, "alpha": 8}}))
    code, _, err = run_cli(["--conf", conf, "astuner.trainer_common.total_training_steps=1",
                            "astuner.trainer_common.test_freq=-1", "astuner.trainer_common.val_before_train=false"],
                           capsys)
    assert code == 0, err[-2000:]
    slots = trainers[-1].learner.slots
    assert hasattr(slots["hinter"].model, "peft_config") and slots["hinter"].model.peft_config["default"].r == 4
    assert not hasattr(slots["guesser"].model, "peft_config")  # the others stay full copies of astuner.model


@pytest.mark.parametrize("by", ["agent", "task"])
def test_per_agent_groups_normalise_each_agent_of_a_policy_apart(game, capsys, monkeypatch, by):
    """`algorithm.adv_group: agent` (Dr. MAS): the hinter and the guesser as one policy (`team`); each agent's
    samples of a task are a GRPO group of their own, so their advantages sum to 0 per (task, agent); with the
    default, per task (the two agents together)."""
    from astuner.backbone.debug import learner

    groups: list[dict] = []
    signal: list[bool] = []
    real = learner.assign_advantages

    def spy(samples, *args, **kwargs):
        real(samples, *args, **kwargs)
        signal.append(any(s.advantage != 0 for s in samples))
        sums: dict = {}
        for s in samples:
            key = (s.task_id, s.agent) if by == "agent" else s.task_id
            sums[key] = sums.get(key, 0.0) + s.advantage
        groups.append(sums)

    monkeypatch.setattr(learner, "assign_advantages", spy)

    def one_team(a):
        a["policies"] = {"team": {}, "noise": {"trainable": False}}
        a["rollout"]["agent_policy"] = {"hinter": "team", "guesser": "team", "noise*": "noise"}
        a["trainer_common"]["algorithm"].update(adv_group=by, drop_zero_variance_groups=False)

    code, _, err = run_cli(["--conf", edited(game, one_team), "astuner.trainer_common.total_training_steps=3"], capsys)
    assert code == 0, err
    assert groups and all(abs(total) < 1e-4 for sums in groups for total in sums.values())
    assert any(signal)  # some group's rewards differed: the sums above are of advantages that are not all 0


def test_trinity_refuses_recomputed_old_log_probs_with_several_policies(game, capsys):
    """Trinity's trainer would recompute a step's old log-probs with one adapter for every policy's rows."""
    lora = "tutorial/example_multi_agent_cpu/signal_game_lora.yaml"
    code, _, err = run_cli(["--conf", lora, "--dry-run", "--backbone", "trinity",
                            "+trinity.algorithm.bypass_old_logprobs=false"], capsys)
    assert code == 2 and "trinity.algorithm.bypass_old_logprobs false with astuner.policies" in err, err
