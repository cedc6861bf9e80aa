"""The seed tutorial's math-agent YAML, as a user runs it, on the distributed backbones' CPU mode: the file
verbatim (`tutorial/example_math_agent/math_agent.yaml`: two vLLM engines asked for, no memory key, n_gpus_per_node
left at auto), with only the dataset (a GSM8K sample), the model (a tiny one), the device and the sizes
overridden. vLLM's KV cache is sized from the run (VLLM_CPU_KVCACHE_SPACE), not taken as 85% of the machine,
and it trains 2 steps through verl's or Trinity's own workers across the two nodes of a Ray cluster (`nnodes: 2`,
a head and a second node joined with `ray start --address`): `--dry-run` says what runs on which node, and the
cluster's actor table shows it ran there. A machine that cannot hold the run is refused before Ray starts. Runs in the verl or the Trinity environment (CI's `.ci/backbones`)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import needs, needs_reason

needs("vllm")

from tests.backbone.ray_nodes import actors_by_node, two_node_cluster  # noqa: E402
from tests.conftest import GSM8K_DIR, REPO_ROOT, require_gsm8k, run_cli  # noqa: E402
from tests.helpers import scalars  # noqa: E402

SEED = REPO_ROOT / "tutorial" / "example_math_agent" / "math_agent.yaml"
HAS_TRINITY = importlib.util.find_spec("trinity") is not None  # Trinity's environment also holds its verl 0.8
HAS_VERL = importlib.util.find_spec("verl") is not None and not HAS_TRINITY


@pytest.fixture(scope="module")
def seed_inputs(tmp_path_factory):
    """A GSM8K sample (8 training, 2 test rows) and a tiny model (vLLM's CPU attention: head size 64; byte-level
    BPE trained on those questions)."""
    require_gsm8k()
    from astuner.model.tiny_model import DEFAULT_CORPUS, build_tiny_model

    tmp = tmp_path_factory.mktemp("seed_yaml")
    data = tmp / "gsm8k"
    data.mkdir()
    rows = {}
    for split, n in (("train", 8), ("test", 2)):
        with open(GSM8K_DIR / f"{split}.jsonl", encoding="utf-8") as f:
            rows[split] = [next(f) for _ in range(n)]
        (data / f"{split}.jsonl").write_text("".join(rows[split]), encoding="utf-8")
    questions = [json.loads(line)["question"] for lines in rows.values() for line in lines]
    model = build_tiny_model(tmp / "model", seed=0, hidden_size=128, heads=2, kv_heads=1, layers=2,
                             corpus=DEFAULT_CORPUS + questions)
    return tmp, data, model


def overrides(data, model):
    """The dataset, model, device and sizes: nothing else of the seed YAML is changed."""
    return [f"astuner.task_reader.huggingface_dat_repo.dataset_path={data}", f"astuner.model.path={model}",
            "astuner.trainer_common.device=cpu",
            "astuner.data.train_batch_size=2", "astuner.rollout.num_repeat=2", "astuner.data.max_prompt_length=1536",
            "astuner.data.max_response_length=256", "astuner.rollout.max_model_len=2048",
            "astuner.rollout.max_response_length_in_one_turn=24", "astuner.trainer_common.total_training_steps=2"]


def seed_run(backbone, tmp, data, model, *extra, env=None):
    """The astuner command on the seed YAML; on a private head (--with-ray), or on the cluster `env` names."""
    env = {k: v for k, v in (env or os.environ).items()
           if k != "VLLM_CPU_KVCACHE_SPACE" and (env is not None or k != "RAY_ADDRESS")}
    return subprocess.run([sys.executable, "-m", "astuner", "--conf", str(SEED), "--backbone", backbone, "--with-ray",
                           "--exp-dir", str(tmp / "runs"), *overrides(data, model), *extra],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200)


def trained_on_two_nodes(backbone, seed_inputs):
    """The seed YAML with `nnodes: 2` on a two-node cluster: what --dry-run printed, the run folder, the run's
    logged machine line, and the actors the cluster ran (with their node)."""
    tmp, data, model = seed_inputs
    with two_node_cluster() as env:
        dry = seed_run(backbone, tmp, data, model, "astuner.trainer_common.nnodes=2", "--dry-run", env=env)
        assert dry.returncode == 0, (dry.stdout + dry.stderr)[-4000:]
        proc = seed_run(backbone, tmp, data, model, "astuner.trainer_common.nnodes=2", env=env)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        actors = actors_by_node(env)
    root = tmp / "runs" / "math_agent"
    log = (root / "astuner.log").read_text()
    planned = next(line for line in (dry.stdout + dry.stderr).splitlines() if "machine: CPU mode" in line)
    return root, planned, next(line for line in log.splitlines() if "machine: CPU mode" in line), actors


FSDP_WORKERS = "create_colocated_worker_cls.<locals>.WorkerDict"  # verl's and Trinity's trainer processes


def nodes_of(actors, *classes):
    """class -> the nodes its actors ran on."""
    return {c: sorted(a["node"] for a in actors if a["class"] == c) for c in classes}


@pytest.mark.skipif(not HAS_VERL, reason=needs_reason("verl"))
def test_verl_trains_the_seed_yaml_across_two_nodes_on_the_cpu(seed_inputs):
    root, planned, line, actors = trained_on_two_nodes("verl", seed_inputs)
    assert "on each of the 2 nodes: 1 FSDP worker(s) (actor, reference) and 1 vLLM engine(s)" in planned, planned
    assert "KV cache 1 GiB per engine × 2" in line  # not 85% of the machine
    assert nodes_of(actors, FSDP_WORKERS, "vLLMHttpServer") == {FSDP_WORKERS: ["head", "second"],
                                                             "vLLMHttpServer": ["head", "second"]}, json.dumps(actors)
    import yaml

    verl_config = yaml.safe_load((root / "verl_config.yaml").read_text())
    assert verl_config["trainer"]["nnodes"] == 2
    assert verl_config["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert set(scalars(root / "tensorboard")["critic/score/mean"]) == {1, 2}


@pytest.mark.skipif(not HAS_TRINITY, reason=needs_reason("trinity"))
def test_trinity_trains_the_seed_yaml_across_two_nodes_on_the_cpu(seed_inputs):
    root, planned, line, actors = trained_on_two_nodes("trinity", seed_inputs)
    assert "node 1: vLLM engine 1; node 2: trainer (1 GPU)" in planned, planned
    assert "KV cache 1 GiB per engine × 1" in line and "(trinity_only__n_vllm_engine: 2 applies on GPUs)" in line
    placed = nodes_of(actors, "vLLMRolloutModel", FSDP_WORKERS)  # the rollout engine on one node, the trainer on the other
    assert len(placed["vLLMRolloutModel"]) == len(placed[FSDP_WORKERS]) == 1, json.dumps(actors)
    assert {*placed["vLLMRolloutModel"], *placed[FSDP_WORKERS]} == {"head", "second"}, json.dumps(actors)
    explorer, trainer = scalars(root / "tensorboard" / "explorer"), scalars(root / "tensorboard" / "trainer")
    assert explorer["rollout/finished_task_count"] == {1: 2, 2: 2}  # train_batch_size tasks per explorer step
    assert set(trainer["actor/grad_norm"]) == {1, 2}  # two trainer steps


@pytest.mark.skipif(not (HAS_VERL or HAS_TRINITY), reason=needs_reason("verl or trinity"))
def test_a_machine_that_cannot_hold_the_run_is_refused_before_ray_starts(seed_inputs, capsys, monkeypatch):
    from astuner.backbone import machine

    tmp, data, model = seed_inputs
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.setattr(machine, "available_memory", lambda: 512 * 2**20)  # 0.5 GiB free

    def no_head(*args, **kwargs):
        raise AssertionError("a Ray head was started")

    from astuner.backbone import ray_cluster

    monkeypatch.setattr(ray_cluster, "_start_head", no_head)
    backbone = "verl" if HAS_VERL else "trinity"
    code, _, err = run_cli(["--conf", str(SEED), "--backbone", backbone, "--with-ray", "--exp-dir",
                            str(tmp / "refused"), *overrides(data, model)], capsys)
    assert code == 2
    assert err.startswith("astuner: error: the CPU mode needs 1.") and "but this machine has 0.5 GiB available" in err
    assert "astuner.rollout.max_num_seqs (40) or astuner.rollout.max_model_len (2048)" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp / "refused").exists()  # nothing written (and no Ray head started: no_head)


@pytest.mark.skipif(not (HAS_VERL or HAS_TRINITY), reason=needs_reason("verl or trinity"))
def test_an_engine_that_fails_to_start_ends_the_run_with_its_root_cause(seed_inputs):
    """vLLM's engine core refuses a KV cache larger than the machine (the user's VLLM_CPU_KVCACHE_SPACE; the
    memory reading is faked up so that our own check lets it through): the run ends with vLLM's reason in the
    one-line error, not with verl's 'internal failure' or Trinity's 'Engine core initialization failed'."""
    tmp, data, model = seed_inputs
    backbone = "verl" if HAS_VERL else "trinity"
    program = ("import sys; from astuner.backbone import machine; machine.available_memory = lambda: 2**50; "
               "from astuner.cli import main; sys.exit(main(sys.argv[1:]))")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["VLLM_CPU_KVCACHE_SPACE"] = "100000"
    proc = subprocess.run([sys.executable, "-c", program, "--conf", str(SEED), "--backbone", backbone, "--with-ray",
                           "--exp-dir", str(tmp / "engine_fails"), *overrides(data, model)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "vLLM's engine failed to start: ValueError: Available memory on node 0" in last, last
    assert "requested memory for kv" in last and "internal failure" not in last


@pytest.mark.skipif(not (HAS_VERL or HAS_TRINITY), reason=needs_reason("verl or trinity"))
def test_the_cpu_mode_over_two_nodes_needs_a_cluster_of_two(seed_inputs, capsys, monkeypatch):
    """A head that --with-ray starts is one node: nnodes 2 in the CPU mode is refused before anything is written,
    saying how to make the cluster."""
    tmp, data, model = seed_inputs
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr("astuner.backbone.ray_cluster.recorded_cluster", lambda: None)
    code, _, err = run_cli(["--conf", str(SEED), "--backbone", "verl" if HAS_VERL else "trinity", "--with-ray",
                            "--exp-dir", str(tmp / "two_nodes"), *overrides(data, model),
                            "astuner.trainer_common.nnodes=2"], capsys)
    assert code == 2 and "astuner.trainer_common.nnodes is 2: the run needs a Ray cluster of 2 nodes" in err, err
    assert "ray start --address=<head address>" in err and not (tmp / "two_nodes").exists()
