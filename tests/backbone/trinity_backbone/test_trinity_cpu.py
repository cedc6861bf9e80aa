"""The trinity backbone's CPU mode as Trinity itself reads it (its `check_and_update()`), the vLLM plug-in that
carries it into vLLM's processes, and astuner's per-episode operators inside Trinity's experience pipeline.
The run itself is tests/backbone/trinity_backbone/test_trinity_e2e.py. Trinity environment only."""

from __future__ import annotations

import pytest

from tests.conftest import needs

needs("trinity")

import yaml  # noqa: E402

from astuner.backbone.trinity.translate import translate_to_trinity  # noqa: E402
from astuner.config import load_run_config  # noqa: E402
from tests.conftest import REPO_ROOT  # noqa: E402

TOOL = REPO_ROOT / "tutorial" / "example_tool_cpu" / "calc_agent.yaml"


def trinity_checked(overrides, tmp_path, conf=TOOL):
    from trinity.common.config import load_config

    path = tmp_path / "trinity_config.yaml"
    path.write_text(yaml.safe_dump(translate_to_trinity(load_run_config(conf, overrides), tmp_path)))
    return load_config(str(path)).check_and_update()


def test_cpu_mode_is_explorer_and_trainer_on_the_cpu(tmp_path, tiny_model_dir, monkeypatch):
    from trinity.trainer.verl.config import build_verl_config

    monkeypatch.chdir(REPO_ROOT)
    # the tool tutorial asks for 8 episodes at once; 2 engines would need 2 GPUs on the GPU road
    cfg = trinity_checked([f"astuner.model.path={tiny_model_dir}", "astuner.trainer_common.device=cpu",
                           "astuner.trainer_common.trinity_only__n_vllm_engine=2"], tmp_path)
    assert cfg.mode == "both" and cfg.cluster.total_gpu_num == 2  # logical GPUs of the run's Ray head
    assert cfg.cluster.explorer_gpu_num == 1 and cfg.cluster.trainer_gpu_num == 1
    model = cfg.explorer.rollout_model
    assert model.engine_num == 1 and model.tensor_parallel_size == 1
    assert model.enforce_eager and model.dtype == "float32"
    assert cfg.synchronizer.sync_method.value == "checkpoint"  # weights through the trainer's checkpoints
    assert cfg.explorer.runner_per_model == 4  # max_env_worker 8 = 4 runners × num_repeat 2
    assert cfg.explorer.max_retry_times == 0  # a failed episode is counted once, not run again
    verl = build_verl_config(cfg)  # what Trinity's trainer hands its verl 0.8 workers
    assert verl.actor.strategy == "fsdp2" and not verl.actor.use_remove_padding and not verl.actor.use_torch_compile
    for role in (verl.actor, verl.ref):
        assert dict(role.fsdp_config.mixed_precision) == {"param_dtype": "fp32", "reduce_dtype": "fp32",
                                                           "buffer_dtype": "fp32"}
    assert verl.model.override_config.attn_implementation == "sdpa"


def test_device_auto_without_a_gpu_is_the_cpu_mode(tmp_path, tiny_model_dir, monkeypatch):
    from astuner.backbone import machine

    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setattr(machine, "gpu_present", lambda: False)
    assert trinity_checked([f"astuner.model.path={tiny_model_dir}"], tmp_path).mode == "both"
    monkeypatch.setattr(machine, "gpu_present", lambda: True)  # a machine with one GPU, counted (auto)
    monkeypatch.setattr(machine, "visible_gpus", lambda: 1)
    monkeypatch.setattr(machine, "cluster_gpus_per_node", lambda: None)
    assert trinity_checked([f"astuner.model.path={tiny_model_dir}"], tmp_path).mode == "colocate"


def test_vllm_plugin_acts_only_in_the_cpu_mode(monkeypatch):
    needs("vllm")
    import trinity.common.models.vllm_patch as trinity_vllm_patch
    from vllm.platforms.cpu import CpuPlatform

    from astuner.backbone.trinity import vllm_cpu

    # the entry point vLLM loads in each of its processes
    from importlib.metadata import entry_points
    assert any(ep.value == "astuner.backbone.trinity.vllm_cpu:register"
               for ep in entry_points(group="vllm.general_plugins"))
    for name in ("check_and_update_config",):
        monkeypatch.setattr(CpuPlatform, name, CpuPlatform.__dict__[name])
    monkeypatch.setattr(trinity_vllm_patch, "_get_api_server_runner", trinity_vllm_patch._get_api_server_runner)
    before = CpuPlatform.__dict__["check_and_update_config"]
    monkeypatch.delenv(vllm_cpu.ENV, raising=False)
    vllm_cpu.register()
    assert CpuPlatform.__dict__["check_and_update_config"] is before  # anywhere else: nothing changes

    monkeypatch.setenv(vllm_cpu.ENV, "1")
    vllm_cpu.register()
    assert CpuPlatform.__dict__["check_and_update_config"] is not before
    # vLLM 0.29 has no vllm.entrypoints.launcher: Trinity's engine serves through ours
    assert trinity_vllm_patch._get_api_server_runner(None) is vllm_cpu.serve_engine
    assert vllm_cpu.worker_env()["VLLM_PLUGINS"] == vllm_cpu.PLUGIN_NAME  # Trinity's own plug-in is left out


def _experiences():
    from trinity.common.experience import EID, Experience

    def exp(episode, run, reward, task=0):
        return Experience(eid=EID(batch=1, task=task, run=run), tokens=[1, 2, 3], prompt_length=1, reward=reward,
                          info={"episode_uuid": episode, "task_index": {"taskset_id": 0, "index": task}})

    # task 0: episode a (reward 1) was split into 3 samples, episode b (reward 0) into 1
    return [exp("a", 0, 1.0), exp("a", 0, 1.0), exp("a", 0, 1.0), exp("b", 1, 0.0),
            # task 1: two episodes of one sample each, both reward 1 (no variance)
            exp("c", 0, 1.0, task=1), exp("d", 1, 1.0, task=1)]


def test_pass_rate_and_std_filter_count_episodes_in_trinitys_pipeline(tmp_path, tiny_model_dir, monkeypatch):
    import asyncio

    from trinity.buffer.operators import create_operators
    from trinity.common.constants import SELECTOR_METRIC

    monkeypatch.chdir(REPO_ROOT)
    cfg = trinity_checked([f"astuner.model.path={tiny_model_dir}", "astuner.data_processor.experience_pipeline."
                           "operators=[{name: pass_rate_calculator}, {name: reward_std_filter, args: {threshold: 0.45}}]"],
                         tmp_path)
    # the short groups astuner puts first, the user's two, then the zero-variance drop and the step padding
    _, pass_rate, std_filter, _, _ = create_operators(cfg.data_processor.experience_pipeline.operators)
    exps, metrics = asyncio.run(pass_rate.process(_experiences()))  # Trinity's async operator wrapper
    assert len(exps) == 6
    rates = dict(zip(metrics[SELECTOR_METRIC][0]["indices"], metrics[SELECTOR_METRIC][0]["values"]))
    assert rates == {0: 0.5, 1: 1.0}  # per episode; Trinity's own operator says 0.75 for task 0 (per sample)
    kept, metrics = asyncio.run(std_filter.process(_experiences()))
    # task 0's reward std: 0.5 over its episodes (kept), 0.43 over its samples (Trinity's own would drop it)
    assert [e.info["episode_uuid"] for e in kept] == ["a", "a", "a", "b"] and metrics["operator_filtered_count"] == 2


@pytest.mark.parametrize("overrides, interval, offset", [
    (["astuner.trainer_common.off_policy.max_staleness=2"], 1, 2),
    (["astuner.trainer_common.off_policy.sync_interval=4"], 4, 0),
    (["astuner.trainer_common.off_policy.sync_interval=2", "astuner.trainer_common.off_policy.sync_offset=1"], 2, 1)])
def test_the_off_policy_schedule_is_trinitys_own_synchronizer(tmp_path, tiny_model_dir, monkeypatch, overrides,
                                                               interval, offset):
    """trainer_common.off_policy means Trinity's schedule: its explorer syncs every sync_interval steps,
    sync_offset steps ahead, waiting for the weights (fixed), as Trinity's own check leaves it."""
    from astuner.config.sync_schedule import SyncSchedule
    from astuner.config import load_run_config

    monkeypatch.chdir(REPO_ROOT)
    cfg = trinity_checked([f"astuner.model.path={tiny_model_dir}", "astuner.trainer_common.device=cpu", *overrides],
                          tmp_path)
    sync = cfg.synchronizer
    assert (sync.sync_interval, sync.sync_offset, sync.sync_style.value) == (interval, offset, "fixed")
    assert sync.explorer_sync_interval == sync.trainer_sync_interval == interval
    ours = SyncSchedule.of(load_run_config(TOOL, overrides).astuner.trainer_common.off_policy)
    assert (ours.interval, ours.offset) == (interval, offset)
