"""The trinity backbone in an environment with Trinity-RFT installed (CI's trinity job): the generated
config loads with Trinity's own loader, Trinity's file reader yields our tasks, and our Trinity
workflow turns an episode into Experiences with correct action masks. Skipped where Trinity is absent."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from tests.conftest import needs

needs("trinity")

from astuner.backbone.runtime import task_from_row  # noqa: E402
from tests.conftest import REPO_ROOT  # noqa: E402
from tests.helpers import ScriptedEngine, prepare_seed_run  # noqa: E402

SEED = REPO_ROOT / "tutorial" / "example_math_agent" / "math_agent.yaml"


@pytest.fixture
def prepared(tmp_path, tiny_model_dir, gsm8k_dir, monkeypatch):
    from astuner.backbone.trinity.backbone import prepare

    monkeypatch.chdir(REPO_ROOT)
    # 4 GPUs: the seed's 2 vLLM engines and a trainer (on one GPU Trinity runs colocated with one engine)
    return prepare_seed_run(prepare, tmp_path, tiny_model_dir, gsm8k_dir, ("astuner.trainer_common.n_gpus_per_node=4", "astuner.trainer_common.device=cuda",))


def test_generated_config_loads_and_round_trips(prepared):
    from trinity.common.config import load_config

    run, root, path = prepared
    cfg = load_config(str(path))
    assert cfg.model.model_path == run.astuner.model.path and cfg.model.max_model_len == 4096
    assert cfg.algorithm.algorithm_type == "grpo" and cfg.algorithm.repeat_times == 4
    # experiences per trainer step: tasks × num_repeat × max_sample_per_task (each step padded to it)
    assert cfg.buffer.batch_size == 264 and cfg.buffer.train_batch_size == 264 * 4 * 4
    assert cfg.explorer.rollout_model.engine_num == 2
    assert cfg.explorer.rollout_model.extra_engine_args == {"max_num_seqs": 40}
    assert cfg.trainer.max_token_len_per_gpu == 13000  # the seed's trinity: subtree
    taskset = cfg.buffer.explorer_input.taskset
    assert taskset.path == str(root / "trinity_data") and taskset.data_selector.selector_type == "shuffle"
    assert cfg.buffer.explorer_input.default_workflow_type.endswith("AstunerTrinityWorkflow")
    assert cfg.monitor.cache_dir == str(root / "tensorboard")


def test_trinity_file_reader_yields_our_tasks(prepared):
    from trinity.buffer.reader.file_reader import FileReader
    from trinity.common.config import load_config

    from astuner.task_reader import build_task_reader

    run, _, path = prepared
    storage = load_config(str(path)).buffer.explorer_input.taskset.to_storage_config()
    storage.batch_size = 4
    tasks = asyncio.run(FileReader(storage).read())
    ours = {t.task_id: t for t in build_task_reader(run.astuner, run.extra_roots).train_tasks()}
    read = [task_from_row(t.raw_task) for t in tasks]  # in the order of Trinity's shuffle selector
    assert len(read) == 4 and all(task == ours[task.task_id] for task in read)


class FakeCompletions:
    def __init__(self, engine):
        self.engine = engine

    async def create(self, *, model, prompt, max_tokens, temperature, top_p, logprobs, extra_body):
        from astuner.model.engines.base import SamplingParams

        assert extra_body["return_token_ids"] is True
        result = await self.engine.generate(prompt, SamplingParams(temperature, top_p, max_tokens))
        choice = SimpleNamespace(model_dump=lambda: {"token_ids": result.token_ids, "finish_reason": "stop",
                                                     "logprobs": {"token_logprobs": result.logprobs}})
        return SimpleNamespace(choices=[choice])


def test_workflow_turns_an_episode_into_experiences(prepared, tokenizer):
    from trinity.common.config import load_config
    from trinity.common.workflows.workflow import Task as TrinityTask

    from astuner.backbone.runtime import task_row
    from astuner.backbone.trinity.workflow import AstunerTrinityWorkflow
    from astuner.task_reader import build_task_reader

    run, _, path = prepared
    taskset = load_config(str(path)).buffer.explorer_input.taskset
    replies = ['Let me compute.\n<tool_call>\n{"name": "execute_python_code", "arguments": {"code": "print(48 + 24)"}}'
               '\n</tool_call>', "So she sold \\boxed{72} clips."]
    engine = ScriptedEngine(tokenizer, replies)
    client = SimpleNamespace(completions=FakeCompletions(engine), model_path=run.astuner.model.path)
    model = SimpleNamespace(get_openai_async_client=lambda: client, get_openai_client=lambda: client)
    row = task_row(build_task_reader(run.astuner, run.extra_roots).train_tasks()[0])
    task = TrinityTask(workflow=AstunerTrinityWorkflow, raw_task=row, workflow_args=taskset.workflow_args,
                       rollout_args=taskset.rollout_args)
    workflow = AstunerTrinityWorkflow(task=task, model=model)
    (exp,) = asyncio.run(workflow.run_async())
    assert exp.reward == 1.0  # GSM8K row 0: 72
    tokens = exp.tokens.tolist()
    mask = exp.action_mask.tolist()
    response = tokens[exp.prompt_length:]
    assert len(mask) == len(response) == len(exp.logprobs)
    generated = [t for t, m in zip(response, mask) if m]
    assert generated == engine.outputs[0] + engine.outputs[1]  # exactly the engine's tokens
    given = tokenizer.decode([t for t, m in zip(response, mask) if not m])
    assert "<tool_response>" in given and "72" in given  # the tool's output, not trained


def test_dry_run_validates_the_users_trinity_subtree(tmp_path, capsys, monkeypatch):
    from tests.conftest import run_cli

    monkeypatch.chdir(tmp_path)  # the run folder the dry run checks: not the checkout's launcher_record/
    code, out, _ = run_cli(["--conf", str(SEED), "--backbone", "trinity", "--dry-run"], capsys)
    assert code == 0 and "AstunerTrinityWorkflow" in out
    code, _, err = run_cli(["--conf", str(SEED), "--backbone", "trinity", "--dry-run",
                            "+trinity.explorer.bogus_key=1"], capsys)
    assert code == 2 and "Key 'bogus_key' not in 'ExplorerConfig'" in err


def trinity_loss(tmp_path, model_dir, gsm8k_dir, *overrides):
    """The seed translated with `overrides`, loaded and checked by Trinity itself; returns Trinity's Config, the
    loss its verl workers hand to verl's engine (`build_trinity_loss(config.algorithm)`, as
    `set_trinity_config` does) and the verl config Trinity synthesises for its trainer."""
    from trinity.common.config import load_config
    from trinity.trainer.verl.config import build_verl_config
    from trinity.trainer.verl.losses import build_trinity_loss

    from astuner.backbone.trinity.backbone import prepare

    # 4 GPUs: the seed's 2 rollout engines and 2 for the trainer (Trinity's check counts them, without Ray)
    _, _, path = prepare_seed_run(prepare, tmp_path, model_dir, gsm8k_dir,
                                  ("astuner.trainer_common.n_gpus_per_node=4", "astuner.trainer_common.device=cuda", *overrides))
    cfg = load_config(str(path)).check_and_update()
    return cfg, build_trinity_loss(cfg.algorithm), build_verl_config(cfg)


def test_loss_settings_reach_trinitys_loss_kl_off(tmp_path, tiny_model_dir, gsm8k_dir, monkeypatch):
    from trinity.algorithm.kl_fn.kl_fn import DummyKLFn

    monkeypatch.chdir(REPO_ROOT)
    cfg, loss, verl = trinity_loss(tmp_path, tiny_model_dir, gsm8k_dir)  # the defaults: use_kl_loss false
    assert isinstance(loss.kl_loss_fn, DummyKLFn) and not loss.use_kl_loss  # no KL loss at all
    assert cfg.algorithm.kl_loss_fn == "none" and verl.actor.use_kl_loss is False
    assert (loss.policy_loss_fn.clip_range_low, loss.policy_loss_fn.clip_range_high) == (0.2, 0.2)
    assert loss.entropy_loss_fn.entropy_coef == 0.0
    assert loss.loss_agg_mode == loss.policy_loss_fn.loss_agg_mode == verl.actor.loss_agg_mode == "token-mean"


def test_loss_settings_reach_trinitys_loss_kl_on(tmp_path, tiny_model_dir, gsm8k_dir, monkeypatch):
    from trinity.algorithm.kl_fn.kl_fn import K1Fn

    monkeypatch.chdir(REPO_ROOT)
    al = "astuner.trainer_common.algorithm"
    cfg, loss, verl = trinity_loss(
        tmp_path, tiny_model_dir, gsm8k_dir, f"{al}.use_kl_loss=true", f"{al}.kl_loss_type=kl",
        f"{al}.kl_loss_coef=0.05", f"{al}.clip_ratio_low=0.1", f"{al}.clip_ratio_high=0.28",
        f"{al}.entropy_coeff=0.01", f"{al}.loss_agg_mode=seq-mean-token-sum", f"{al}.clip_ratio_c=2.5",
        "astuner.trainer_common.ppo_epochs=2")
    assert isinstance(loss.kl_loss_fn, K1Fn) and loss.use_kl_loss and verl.actor.use_kl_loss is True
    assert loss.kl_loss_fn.kl_coef == 0.05
    assert (loss.policy_loss_fn.clip_range_low, loss.policy_loss_fn.clip_range_high) == (0.1, 0.28)
    assert loss.policy_loss_fn.clip_ratio_c == 2.5  # dual clip
    assert verl.actor.ppo_epochs == 2
    assert loss.entropy_loss_fn.entropy_coef == 0.01
    assert loss.loss_agg_mode == loss.policy_loss_fn.loss_agg_mode == verl.actor.loss_agg_mode == "seq-mean-token-sum"
    assert cfg.algorithm.algorithm_type == "grpo"


def test_users_trinity_subtree_wins_over_the_loss_translation(tmp_path, tiny_model_dir, gsm8k_dir, monkeypatch):
    from trinity.algorithm.kl_fn.kl_fn import LowVarKLFn

    monkeypatch.chdir(REPO_ROOT)
    _, loss, _ = trinity_loss(tmp_path, tiny_model_dir, gsm8k_dir, "astuner.trainer_common.algorithm.use_kl_loss=true",
                              "+trinity.algorithm.kl_loss_fn_args.kl_coef=0.5",
                              "+trinity.algorithm.policy_loss_fn_args.clip_range_high=0.3")
    assert isinstance(loss.kl_loss_fn, LowVarKLFn) and loss.kl_loss_fn.kl_coef == 0.5  # low_var_kl: astuner's default
    assert (loss.policy_loss_fn.clip_range_low, loss.policy_loss_fn.clip_range_high) == (0.2, 0.3)


def test_optimizer_betas_reach_trinitys_optimizer(tmp_path, tiny_model_dir, gsm8k_dir, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    cfg, _, verl = trinity_loss(tmp_path, tiny_model_dir, gsm8k_dir, "astuner.trainer_common.optim.betas=[0.8,0.95]")
    assert list(cfg.algorithm.optimizer.betas) == [0.8, 0.95]
    assert list(verl.actor.optim.betas) == [0.8, 0.95]  # what verl's actor optimizer is built with


def advantages_kept(cfg):
    """Trinity's advantage fn, built from its registry with the args it gets after check_and_update (as its
    experience pipeline and verl trainer build it), run on two tasks of 2 episodes: one with equal rewards."""
    import torch
    from trinity.algorithm import ADVANTAGE_FN
    from trinity.common.experience import EID, Experience

    fn = ADVANTAGE_FN.get(cfg.algorithm.advantage_fn)(**cfg.algorithm.advantage_fn_args)
    exps = [Experience(eid=EID(task=task, run=run), tokens=torch.tensor([1, 2, 3]), prompt_length=2, reward=reward,
                       logprobs=torch.tensor([-0.5]), action_mask=torch.tensor([True]))
            for task, run, reward in [(0, 0, 1.0), (0, 1, 1.0), (1, 0, 0.0), (1, 1, 1.0)]]
    kept, _ = fn(exps)
    return sorted(exp.eid.task for exp in kept)


def pipeline_step(cfg, exps):
    """One explorer step's experiences through the operators Trinity's ExperiencePipeline builds from `cfg`
    (ours, then the algorithm's advantage fn), in its order: what the trainer's queue receives."""
    from trinity.buffer.operators.experience_operator import create_operators
    from trinity.buffer.pipelines.experience_pipeline import ExperiencePipeline

    pipeline = ExperiencePipeline.__new__(ExperiencePipeline)  # its assembly, without its buffers and actors
    pipeline.operators, pipeline.auxiliary_models = create_operators(
        cfg.data_processor.experience_pipeline.operators), {}
    pipeline._set_algorithm_operators(cfg.algorithm)
    metrics = {}
    for operator in pipeline.operators:
        exps, metric = asyncio.run(operator.process(exps))
        metrics.update(metric)
    return exps, metrics


def uneven_step():
    """Task 0: two episodes with equal rewards. Task 1: rewards 0 and 1, the second episode in two samples.
    (An episode that failed has no experience.)"""
    import torch
    from trinity.common.experience import EID, Experience

    rows = [(0, 0, 1.0, "a"), (0, 1, 1.0, "b"), (1, 0, 0.0, "c"), (1, 1, 1.0, "d"), (1, 1, 1.0, "d")]
    return [Experience(eid=EID(batch=1, task=task, run=run), tokens=torch.tensor([1, 2, 3, 4]), prompt_length=2,
                       reward=reward, logprobs=torch.tensor([-0.5, -0.5]), action_mask=torch.tensor([True, True]),
                       info={"episode_uuid": episode, "model_version": 0})
            for task, run, reward, episode in rows]


@pytest.mark.parametrize("adv_estimator", ["grpo", "multi_step_grpo"])
def test_every_explorer_step_fills_exactly_one_trainer_step(tmp_path, tiny_model_dir, gsm8k_dir, monkeypatch,
                                                            adv_estimator):
    """Trinity's trainer reads buffer.train_batch_size experiences per step and splits them into mini-batches
    of that size: a step with fewer (failed episodes, dropped groups) left it waiting out its read timeout,
    more (multi-sample episodes) spilled into the next step. Each step is padded to the most it can yield,
    with rows that carry no loss; drop_zero_variance_groups drops (an operator, before the padding)."""
    from trinity.trainer.verl.utils import to_data_proto

    monkeypatch.chdir(REPO_ROOT)
    al = "astuner.trainer_common.algorithm"
    small = ("astuner.data.train_batch_size=2", "astuner.rollout.num_repeat=2",
             "astuner.rollout.multi_turn.max_sample_per_task=2", f"{al}.adv_estimator={adv_estimator}")
    (tmp_path / "on").mkdir(), (tmp_path / "off").mkdir()
    cfg, _, verl = trinity_loss(tmp_path / "on", tiny_model_dir, gsm8k_dir, *small)
    assert cfg.buffer.train_batch_size == 2 * 2 * 2 == cfg.buffer.trainer_input.experience_buffer.batch_size
    assert verl.actor.ppo_mini_batch_size == 8  # one optimizer step per trainer step
    exps, metrics = pipeline_step(cfg, uneven_step())
    real = [exp for exp in exps if not exp.info.get("astuner_padding")]
    assert len(exps) == 8 and metrics["padding"] == 5
    assert sorted(exp.info["episode_uuid"] for exp in real) == ["c", "d", "d"]  # task 0's equal rewards dropped
    assert all(abs(float(exp.advantages.sum())) > 0 for exp in real)
    padding = [exp for exp in exps if exp.info.get("astuner_padding")]
    assert all(not exp.action_mask.any() and float(exp.advantages.abs().sum()) == 0 for exp in padding)
    batch = to_data_proto(exps, 0, None, logging.getLogger("test"))  # Trinity's conversion for its verl trainer takes the padded step
    assert batch.batch["response_mask"].sum(-1).tolist() == [2, 2, 2, 0, 0, 0, 0, 0]

    cfg, _, _ = trinity_loss(tmp_path / "off", tiny_model_dir, gsm8k_dir, *small,
                             f"{al}.drop_zero_variance_groups=false")
    exps, metrics = pipeline_step(cfg, uneven_step())
    assert len(exps) == 8 and metrics["padding"] == 3  # task 0 kept, with advantage 0
    assert cfg.algorithm.advantage_fn_args["std_threshold"] is None


@pytest.mark.parametrize("short_group", ["drop", "train"])
def test_a_group_short_of_a_failed_episode_leaves_the_step_whole(tmp_path, tiny_model_dir, gsm8k_dir, monkeypatch,
                                                                 short_group):
    """rollout.short_group on Trinity: a failed episode hands Trinity one marker that trains nothing (our
    workflow's `episode_to_experiences`); our first operator takes the marker's whole group out of the step (drop)
    or the marker alone (train), before the advantage fn and the padding."""
    from trinity.common.experience import EID

    from astuner.backbone.trinity.workflow import episode_to_experiences
    from astuner.rollout.manager import EpisodeResult
    from astuner.schema import Task

    monkeypatch.chdir(REPO_ROOT)
    cfg, _, _ = trinity_loss(tmp_path, tiny_model_dir, gsm8k_dir, "astuner.data.train_batch_size=2",
                             "astuner.rollout.num_repeat=2", "astuner.rollout.multi_turn.max_sample_per_task=2",
                             f"astuner.rollout.short_group={short_group}",
                             "astuner.trainer_common.algorithm.drop_zero_variance_groups=false")
    failed = EpisodeResult(task=Task(task_id="t1", main_query="q"), repeat_index=0, episode_uuid="c", failed=True,
                           error="the environment is unreachable")
    (marker,) = episode_to_experiences(failed)
    assert marker.reward == 0.0 and not marker.action_mask.any() and marker.metrics["failed"] == 1.0
    marker.eid = EID(batch=1, task=1, run=0)  # as Trinity's runner names it: task 1's first run
    step = [exp for exp in uneven_step() if exp.info["episode_uuid"] != "c"] + [marker]
    exps, metrics = pipeline_step(cfg, step)
    real = sorted(exp.info["episode_uuid"] for exp in exps if not exp.info.get("astuner_padding"))
    assert len(exps) == 8 and metrics["short_groups"] == 1
    if short_group == "drop":
        assert real == ["a", "b"] and metrics["dropped_short_groups"] == 1
    else:
        assert real == ["a", "b", "d", "d"] and metrics["dropped_short_groups"] == 0
    assert cfg.data_processor.experience_pipeline.operators[0].name.endswith("ShortGroups")
    assert not episode_to_experiences(EpisodeResult(task=Task(task_id="t2", main_query="q"), repeat_index=0,
                                                    episode_uuid="x"))  # no call, no failure: nothing


def test_trinity_step_size_below_what_a_step_yields_is_refused(tmp_path, tiny_model_dir, gsm8k_dir, monkeypatch):
    from astuner.errors import ConfigError

    monkeypatch.chdir(REPO_ROOT)
    with pytest.raises(ConfigError, match="trinity.buffer.train_batch_size 8 is below what one explorer step"):
        trinity_loss(tmp_path, tiny_model_dir, gsm8k_dir, "astuner.data.train_batch_size=2",
                     "astuner.rollout.num_repeat=2", "+trinity.buffer.train_batch_size=8")


def test_users_trinity_advantage_fn_gets_no_translated_args(tmp_path, tiny_model_dir, gsm8k_dir, monkeypatch):
    from trinity.algorithm.advantage_fn.reinforce_advantage import REINFORCEGroupAdvantage

    monkeypatch.chdir(REPO_ROOT)
    cfg, _, _ = trinity_loss(tmp_path, tiny_model_dir, gsm8k_dir, "+trinity.algorithm.advantage_fn=reinforce")
    assert cfg.algorithm.advantage_fn_args == REINFORCEGroupAdvantage.default_args()  # Trinity's, not std_threshold
    assert advantages_kept(cfg) == [0, 0, 1, 1]


def test_validation_num_repeat_reaches_trinitys_eval_tasks(tmp_path, tiny_model_dir, gsm8k_dir, monkeypatch):
    from trinity.buffer.reader.file_reader import FileReader

    monkeypatch.chdir(REPO_ROOT)
    cfg, _, _ = trinity_loss(tmp_path, tiny_model_dir, gsm8k_dir, "astuner.rollout.val_kwargs.num_repeat=3")
    (evalset,) = cfg.buffer.explorer_input.eval_tasksets
    assert evalset.repeat_times == 3 and cfg.algorithm.repeat_times == 4  # training: rollout.num_repeat
    storage = evalset.to_storage_config()
    storage.batch_size = 2
    tasks = asyncio.run(FileReader(storage).read())
    assert [t.repeat_times for t in tasks] == [3, 3]  # what Trinity's scheduler runs each eval task with


def test_grpo_advantages_equal_trinitys_own():
    """The debug trainer's GRPO advantages are Trinity's (its GRPO advantage fn with the args we translate)."""
    import torch
    from trinity.algorithm import ADVANTAGE_FN
    from trinity.common.experience import EID, Experience

    from tests.helpers import GRPO_ROWS, our_grpo_advantages

    fn = ADVANTAGE_FN.get("grpo")(std_threshold=None)
    exps = [Experience(eid=EID(task=group, run=i), tokens=torch.tensor([1, 2]), prompt_length=1, reward=reward,
                       logprobs=torch.tensor([0.0]), action_mask=torch.tensor([True]))
            for i, (group, reward) in enumerate(GRPO_ROWS)]
    out, _ = fn(exps)
    theirs = {exp.eid.run: float(exp.advantages[0]) for exp in out}
    assert [theirs[i] for i in range(len(GRPO_ROWS))] == pytest.approx(our_grpo_advantages(True), abs=1e-5)


def test_one_tracker_reaches_trinitys_monitor_and_more_are_refused(tmp_path, monkeypatch):
    from trinity.utils.monitor import MONITOR

    from astuner.backbone.trinity.translate import trinity_monitor
    from astuner.errors import ConfigError

    assert trinity_monitor(["console", "tensorboard"], tmp_path)["monitor_type"] == "tensorboard"
    wandb = trinity_monitor(["console", "wandb"], tmp_path)
    assert wandb["monitor_type"] == "wandb" and MONITOR.get("wandb") is not None  # a name Trinity's registry has
    mlflow = trinity_monitor(["mlflow"], tmp_path)
    assert mlflow["monitor_args"] == {"uri": (tmp_path / "mlruns").as_uri()}
    with pytest.raises(ConfigError, match="Trinity-RFT logs to one tracker, got tensorboard, wandb"):
        trinity_monitor(["console", "tensorboard", "wandb"], tmp_path)
    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="needs SWANLAB_API_KEY|without SWANLAB_API_KEY"):
        trinity_monitor(["swanlab"], tmp_path)


def test_padded_steps_go_through_trinitys_replay_buffer():
    """werewolves' config turns on Trinity's replay buffer (experience_buffer.replay_buffer.enable: its priority
    queue counts each experience's reuse in info["use_count"], which Trinity's workflow runner sets on what a
    workflow returns): the step's padding rows lacked it, and the trainer stopped on KeyError: 'use_count'."""
    from trinity.buffer.storage.queue import AsyncPriorityQueue
    from trinity.common.experience import EID, Experience

    from astuner.backbone.trinity.operators import StepPadding

    made = [Experience(eid=EID(batch=1, task=str(i)), tokens=[1, 2, 3], prompt_length=1, logprobs=[-1.0, -1.0],
                       action_mask=[True, True], reward=1.0, info={"model_version": 3, "use_count": 0})
            for i in range(2)]  # as the runner hands them over
    padded, metrics = StepPadding(5).process(made)
    assert metrics == {"padding": 3} and len(padded) == 5

    async def through_the_queue() -> list:
        queue = AsyncPriorityQueue(capacity=10, reuse_cooldown_time=None)
        for exp in padded:
            await queue.put([exp])
        return [exp for _ in padded for exp in await queue.get()]

    got = asyncio.run(through_the_queue())
    assert len(got) == 5 and all(exp.info["use_count"] == 1 for exp in got)
    assert {exp.info["model_version"] for exp in got} == {3}
