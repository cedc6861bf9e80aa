"""`astuner.model.lora` in the debug backbone: only the adapter trains, the engine samples with it, checkpoints
hold the adapter and resume exactly, `astuner merge-lora` writes base + adapter as one model, the KL
reference is the base model, and a user's mistakes end in one line and exit 2."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import REPO_ROOT, run_cli

LORA = "astuner.model.lora={rank: 4, alpha: 8}"


def tiny_args(steps, *extra):
    # groups with equal rewards are kept so that the entropy bonus alone makes an update every step
    return ["--conf", "tutorial/example_tiny_cpu/tiny_cpu.yaml", f"astuner.trainer_common.total_training_steps={steps}",
            "astuner.data.train_batch_size=4", "astuner.rollout.num_repeat=4", "astuner.trainer_common.test_freq=-1",
            "astuner.trainer_common.val_before_train=false",
            "astuner.trainer_common.algorithm.drop_zero_variance_groups=false", *extra]


def rows(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]


def adapter(root: Path, step: int) -> dict:
    from safetensors.torch import load_file

    return load_file(str(root / "checkpoints" / f"global_step_{step}" / "model" / "adapter_model.safetensors"))


def test_merged_state_dict_is_peft_merge_under_the_base_names(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from astuner.backbone.debug.lora import add_adapter, merged_state_dict

    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    names = set(base.state_dict())
    model = add_adapter(base, SimpleNamespace(rank=4, alpha=8.0, target_modules="all-linear", dropout=0.0))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)  # B starts at zero: give the adapter an effect
    merged = merged_state_dict(model)
    expected = copy.deepcopy(model).merge_and_unload().state_dict()
    assert set(merged) == names == set(expected)  # what an engine with its own weights loads by name
    assert all(torch.allclose(merged[k], expected[k], atol=1e-6) for k in names)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.allclose(merged[q], base.state_dict()[q.replace("q_proj.", "q_proj.base_layer.")])
    assert not any(getattr(m, "merged", False) for m in model.modules())  # the policy itself is left unmerged


def test_merged_state_dict_carries_an_adapted_embedding(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from astuner.backbone.debug.lora import add_adapter, merged_state_dict, tied_embedding_adapted

    def adapted(targets, untie=False):
        base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
        if untie:  # so that peft's own merge (the expectation) does not write the embedding into the head
            base.config.tie_word_embeddings = False
            base.lm_head.weight = torch.nn.Parameter(base.get_input_embeddings().weight.detach().clone())
        model = add_adapter(base, SimpleNamespace(rank=4, alpha=8.0, target_modules=targets, dropout=0.0))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name or "lora_embedding_A" in name:  # the zero-initialised halves (peft)
                    p.normal_(0, 0.1)
        return model

    model = adapted(["q_proj", "embed_tokens"], untie=True)
    merged, expected = merged_state_dict(model), copy.deepcopy(model).merge_and_unload().state_dict()
    key = "model.embed_tokens.weight"
    assert set(merged) == set(expected) and torch.allclose(merged[key], expected[key], atol=1e-6)
    assert not torch.allclose(merged[key], model.get_base_model().get_input_embeddings().base_layer.weight)
    # an engine that loads the model tied cannot hold an adapted head or embedding of a tied model
    assert [tied_embedding_adapted(adapted(t)) for t in (["q_proj"], ["lm_head"], ["embed_tokens"])] == \
        [False, True, True]


def test_lora_trains_the_adapter_only_resumes_exactly_and_merges(project, capsys):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    code, _, err = run_cli(tiny_args(4, LORA, "astuner.experiment_name=straight"), capsys)
    assert code == 0, err
    root = project / "launcher_record" / "straight"
    model_dir = root / "checkpoints" / "global_step_4" / "model"
    assert (model_dir / "adapter_config.json").is_file() and not (model_dir / "model.safetensors").exists()
    assert "trainable of" in err and "LoRA rank 4" in err
    weights = adapter(root, 4)
    assert weights and all("lora_" in k for k in weights)
    assert any(float(t.abs().max()) > 0 for k, t in weights.items() if "lora_B" in k)  # B moved from zero
    # the engine samples with the adapter: its log-probs are the trainer's
    trained = [r for r in rows(root) if "actor/rollout_logprob_diff" in r]
    assert trained and max(r["actor/rollout_logprob_diff"] for r in trained) < 1e-4

    # resumed after step 2, the adapter at step 4 is the uninterrupted run's
    assert run_cli(tiny_args(2, LORA, "astuner.experiment_name=split"), capsys)[0] == 0
    code, _, err = run_cli(tiny_args(4, LORA, "astuner.experiment_name=split") + ["--resume"], capsys)
    assert code == 0, err
    resumed = adapter(project / "launcher_record" / "split", 4)
    assert resumed.keys() == weights.keys() and all(torch.equal(resumed[k], weights[k]) for k in weights)

    # the same run folder without model.lora, or with other LoRA settings: refused, not half-loaded, and the
    # run folder left as it was (its config.yaml is the run's, no config.before_resume_*, no log lines)
    split = project / "launcher_record" / "split"
    before = {p.relative_to(split): p.read_bytes() for p in split.rglob("*") if p.is_file()}
    code, _, err = run_cli(tiny_args(5, "astuner.experiment_name=split") + ["--resume"], capsys)
    assert code == 2 and "holds a LoRA adapter but astuner.model.lora is not set" in err
    code, _, err = run_cli(tiny_args(5, "astuner.model.lora={rank: 8, alpha: 8}", "astuner.experiment_name=split")
                           + ["--resume"], capsys)
    assert code == 2 and "astuner.model.lora.rank is 8 but the checkpoint global_step_4's adapter has 4" in err
    assert {p.relative_to(split): p.read_bytes() for p in split.rglob("*") if p.is_file()} == before

    # merged on export: one model whose logits are the adapted policy's
    out = project / "merged"
    code, _, err = run_cli(["merge-lora", str(root / "checkpoints" / "global_step_4"), "--out", str(out)], capsys)
    assert code == 0, err
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    assert not list(project.glob("merged.partial"))
    from peft import PeftModel

    base_dir = project / "launcher_record" / ".models" / "tiny_cpu_seed0"
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base_dir)), str(model_dir)).eval()
    merged = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    ids = torch.tensor([[1, 5, 9, 12, 3]])
    with torch.no_grad():
        assert torch.allclose(adapted(input_ids=ids).logits, merged(input_ids=ids).logits, atol=1e-5)
    base_weights = load_file(str(base_dir / "model.safetensors"))
    assert any(not torch.equal(base_weights[k], merged.state_dict()[k]) for k in base_weights if k in merged.state_dict())
    code, _, err = run_cli(["merge-lora", str(root / "checkpoints" / "global_step_4"), "--out", str(out)], capsys)
    assert code == 2 and "already exists" in err
    code, _, err = run_cli(["merge-lora", str(base_dir), "--out", str(project / "other")], capsys)
    assert code == 2 and "holds no LoRA adapter" in err and not (project / "other").exists()
    checkpoint = str(root / "checkpoints" / "global_step_4")
    code, _, err = run_cli(["merge-lora", str(project / "missing"), "--out", str(project / "other")], capsys)
    assert code == 2 and "missing does not exist" in err
    code, _, err = run_cli(["merge-lora", checkpoint, "--out", str(project / "no" / "such" / "folder")], capsys)
    assert code == 2 and "is not a folder" in err
    from astuner.model.tiny_model import build_tiny_model

    other = build_tiny_model(project / "other_base", seed=0, hidden_size=32, heads=2)
    code, _, err = run_cli(["merge-lora", checkpoint, "--out", str(project / "other"), "--base", str(other)], capsys)
    error = [line for line in err.splitlines() if line.startswith("astuner: error")]
    assert code == 2 and len(error) == 1 and "does not fit the base model" in error[0] and "check --base" in error[0]
    assert len(error[0]) <= 300, len(error[0])
    assert not (project / "other").exists() and not (project / "other.partial").exists()


def test_kl_reference_of_a_lora_policy_is_the_base_model(project, capsys):
    code, _, err = run_cli(tiny_args(2, LORA, "astuner.trainer_common.algorithm.use_kl_loss=true",
                                     "astuner.trainer_common.algorithm.kl_loss_coef=0.1"), capsys)
    assert code == 0, err
    kl = [r["actor/kl"] for r in rows(project / "launcher_record" / "tiny_cpu") if "actor/kl" in r]
    assert len(kl) == 2 and abs(kl[0]) < 1e-6 < kl[1]  # B = 0 at step 1: the policy is the base model exactly


@pytest.mark.parametrize("override, message", [
    ("astuner.model.lora={rank: 0}", "astuner.model.lora.rank must be positive"),
    ("astuner.model.lora={dropout: 1.0}", "astuner.model.lora.dropout must be in [0, 1)"),
    ("astuner.model.lora={target_modules: 5}", "astuner.model.lora.target_modules must be 'all-linear' or a list"),
    ("astuner.model.lora={rnak: 8}", "did you mean 'astuner.model.lora.rank'"),
])
def test_lora_config_mistakes_are_one_line_exit_2(project, capsys, override, message):
    code, _, err = run_cli(tiny_args(1, override) + ["--dry-run"], capsys)
    assert code == 2 and message in err, err


def test_target_modules_the_model_lacks_or_peft_cannot_adapt(project, capsys):
    code, _, err = run_cli(tiny_args(1, "astuner.model.lora={target_modules: [qkv_proj]}"), capsys)
    assert code == 2 and "astuner.model.lora.target_modules ['qkv_proj']" in err, err
    code, _, err = run_cli(tiny_args(1, "astuner.model.lora={target_modules: [q_proj, mlp]}"), capsys)
    assert code == 2 and "Qwen2MLP" in err and "is not supported" in err, err  # peft's whole reason, one line


def test_an_adapted_head_of_a_tied_model_merges_untied(project, capsys):
    from transformers import AutoModelForCausalLM

    from peft import PeftModel

    code, _, err = run_cli(tiny_args(2, "astuner.model.lora={rank: 4, target_modules: [q_proj, v_proj, lm_head]}"),
                           capsys)
    assert code == 0, err
    model_dir = project / "launcher_record" / "tiny_cpu" / "checkpoints" / "global_step_2" / "model"
    assert run_cli(["merge-lora", str(model_dir), "--out", "merged"], capsys)[0] == 0
    base_dir = project / "launcher_record" / ".models" / "tiny_cpu_seed0"
    base = AutoModelForCausalLM.from_pretrained(str(base_dir))
    assert base.config.tie_word_embeddings
    embedding = base.get_input_embeddings().weight.detach().clone()
    adapted = PeftModel.from_pretrained(base, str(model_dir)).eval()
    merged = AutoModelForCausalLM.from_pretrained("merged").eval()
    assert not merged.config.tie_word_embeddings
    assert torch.equal(merged.get_input_embeddings().weight, embedding)  # the embedding is not the merged head
    ids = torch.tensor([[1, 5, 9, 12, 3]])
    with torch.no_grad():
        assert torch.allclose(adapted(input_ids=ids).logits, merged(input_ids=ids).logits, atol=1e-5)


def test_after_a_warm_start_the_kl_reference_is_the_warm_started_adapter(tmp_path, monkeypatch, capsys):
    """SFT trains the adapter; the KL reference is then a frozen copy of that policy (not the base), also when
    a resumed run loads it back from global_step_0: 1 + 1 steps with a resume equal 2 straight."""
    monkeypatch.chdir(REPO_ROOT)
    tc = "astuner.trainer_common"
    argv = ["--conf", "tutorial/example_agent_cpu/sensor_agent.yaml", "--exp-dir", str(tmp_path),
            f"astuner.model.path={tmp_path / 'model'}", "astuner.model.lora={rank: 8, alpha: 16}",
            f"{tc}.sft.steps=5", f"{tc}.sft.lr=1e-2", f"{tc}.algorithm.use_kl_loss=true", f"{tc}.test_freq=-1",
            "astuner.data.train_batch_size=2", "astuner.rollout.num_repeat=2",
            f"{tc}.algorithm.drop_zero_variance_groups=false", f"{tc}.algorithm.entropy_coeff=0.01",
            f"{tc}.optim.lr=1e-3", f"{tc}.optim.warmup_steps=0", f"{tc}.mini_batch_num=1"]
    kl = {}
    for name, runs in (("straight", [2]), ("split", [1, 2])):
        for i, steps in enumerate(runs):
            extra = ["--resume"] if i else []
            code, _, err = run_cli([*argv, f"astuner.experiment_name={name}", f"{tc}.total_training_steps={steps}",
                                    *extra], capsys)
            assert code == 0, err
        kl[name] = {r["step"]: r["actor/kl"] for r in rows(tmp_path / name) if "actor/kl" in r}
    root = tmp_path / "split"
    assert (root / "checkpoints" / "global_step_0" / "model" / "adapter_config.json").is_file()
    assert any(float(t.abs().max()) > 0 for k, t in adapter(root, 0).items() if "lora_B" in k)  # SFT moved B
    assert abs(kl["straight"][1]) < 1e-6  # step 1 starts from the reference itself: the warm-started policy
    assert kl["straight"][2] > 0 and kl["split"] == kl["straight"]  # the resumed run's reference is the same


def test_merge_lora_of_a_damaged_checkpoint_is_one_line_exit_2(project, capsys):
    code, _, err = run_cli(tiny_args(1, LORA, "astuner.experiment_name=damaged"), capsys)
    assert code == 0, err
    model_dir = project / "launcher_record" / "damaged" / "checkpoints" / "global_step_1" / "model"
    weights = (model_dir / "adapter_model.safetensors").read_bytes()
    config = (model_dir / "adapter_config.json").read_text()

    def merge(name):
        code, _, err = run_cli(["merge-lora", str(model_dir.parent), "--out", str(project / name)], capsys)
        error = [line for line in err.splitlines() if line.startswith("astuner: error")]
        assert code == 2 and len(error) == 1 and len(error[0]) <= 300 and "Traceback" not in err, err
        assert not (project / name).exists() and not (project / f"{name}.partial").exists()
        return error[0]

    (model_dir / "adapter_config.json").write_text(config[: len(config) // 2])  # cut short
    assert "adapter_config.json is not a readable adapter config (JSONDecodeError" in merge("a")
    (model_dir / "adapter_config.json").write_text("[1, 2]")
    assert "a JSON list, not an object" in merge("b")
    (model_dir / "adapter_config.json").write_text(config)
    (model_dir / "adapter_model.safetensors").write_bytes(weights[: len(weights) // 2])  # truncated
    assert "cannot read the adapter weights in" in merge("c") and "damaged" in merge("d")
    # a resume from it says the same, in one line
    (model_dir / "adapter_model.safetensors").write_bytes(weights)
    (model_dir / "adapter_config.json").write_text("{not json")
    code, _, err = run_cli(tiny_args(2, LORA, "astuner.experiment_name=damaged") + ["--resume"], capsys)
    assert code == 2 and "is not a readable adapter config" in err and "Traceback" not in err, err[-2000:]


@pytest.mark.parametrize("other, held", [("lora_A", 14), ("model", 56)])
def test_an_adapter_named_after_a_part_of_the_weight_names_corrupts_another_and_merge_lora_refuses_it(
        tiny_model_dir, tmp_path, capsys, other, held):
    """issue 38: peft saves one adapter of several by dropping the weights whose names hold '.<other adapter>.'.
    Beside an adapter named lora_A the guesser's file loses its 14 lora_A tensors (of 28); beside one named model
    it holds every adapter's (56). Such names are refused before a run (every part of the adapted model's own
    names is), and merge-lora, which used to merge these files and report success, refuses them in one line."""
    from transformers import AutoModelForCausalLM

    from astuner.backbone.debug.lora import OneAdapter, add_adapter
    from astuner.backbone.debug.policies import adapter_name_problem
    from astuner.model.weight_names import name_parts, safetensors_names, weight_names

    lora = SimpleNamespace(rank=4, alpha=8.0, target_modules="all-linear", dropout=0.0)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    model = add_adapter(add_adapter(model, lora, 0, "guesser"), lora, 1, other)
    saved = tmp_path / "guesser"
    saved.mkdir()
    OneAdapter(model, "guesser").save_pretrained(saved)
    assert len(safetensors_names(saved / "adapter_model.safetensors")) == held  # 28 when the names are apart
    code, _, err = run_cli(["merge-lora", str(saved), "--out", str(tmp_path / "merged"), "--base", str(tiny_model_dir)],
                           capsys)
    error = [line for line in err.splitlines() if line.startswith("astuner: error")]
    assert code == 2 and len(error) == 1 and len(error[0]) <= 300, err
    assert "does not match its adapter_config.json" in error[0] and "the checkpoint is damaged" in error[0]
    assert not (tmp_path / "merged").exists()
    # every part of the adapted model's parameter names but the adapters' own is refused as an adapter name,
    # from the model folder's safetensors alone
    parts = name_parts(list(model.state_dict())) - set(model.peft_config)
    assert parts and all(adapter_name_problem(part, weight_names(tiny_model_dir)) for part in parts)
    assert adapter_name_problem("writer", weight_names(tiny_model_dir)) is None


def test_an_adapter_saved_beside_others_under_distinct_names_holds_its_own_tensors_and_merges(tiny_model_dir, tmp_path,
                                                                                             capsys):
    from transformers import AutoModelForCausalLM

    from astuner.backbone.debug.lora import OneAdapter, add_adapter
    from astuner.model.weight_names import safetensors_names

    lora = SimpleNamespace(rank=4, alpha=8.0, target_modules="all-linear", dropout=0.0)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    model = add_adapter(add_adapter(model, lora, 0, "guesser"), lora, 1, "writer")
    OneAdapter(model, "guesser").save_pretrained(tmp_path)
    assert len(safetensors_names(tmp_path / "adapter_model.safetensors")) == 28
    code, _, err = run_cli(["merge-lora", str(tmp_path), "--out", str(tmp_path / "merged"), "--base",
                            str(tiny_model_dir)], capsys)
    assert code == 0, err
