"""`trainer_common.sft` on a distributed backbone: astuner's warm start (the debug backbone's: the expert's
demonstrations played through the user's workflow, then SFT on their generated tokens, `backbone/debug/sft.py`)
run in the driver's process before the backbone starts, on the device the run trains on (the first GPU, or the
CPU in the CPU mode), and released before verl or Trinity take the devices. The weights are saved in the run
folder (`warm_start/model`, the original tokenizer files beside; `warm_start/warm_start.json` records what happened) and handed to
the backbone as its model: its rollouts, actor and KL reference all start from them, in the same command. A resumed
run whose warm start finished reuses it.

Unlike the debug backbone, the warm start trains every weight also when `astuner.model.lora` is set (the RL adapter
then starts at zero on the warm-started weights); the log line says so.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Optional

from loguru import logger

from astuner.errors import RunFailed

FOLDER = "warm_start"
RECORD = "warm_start.json"
WEIGHTS = (".safetensors", ".bin", ".pt", ".index.json")


def copy_tokenizer(source: Path, target: Path) -> None:
    """The model folder's own files but its weights and configs (tokenizer, chat template, vocabulary), copied as
    they are: the backbone's engine reads the same tokenizer the workers load from the original folder."""
    import shutil

    for path in source.iterdir():
        if path.is_file() and not path.name.endswith(WEIGHTS) and not (target / path.name).exists():
            shutil.copy2(path, target / path.name)


def planned_model(run: Any, root: Path) -> Optional[str]:
    """Where the backbone's model will be after the warm start (what `--dry-run` shows), None without one."""
    return str(Path(root).absolute() / FOLDER / "model") if run.astuner.trainer_common.sft.steps > 0 else None


def warm_start(ctx: Any, model_path: Optional[str] = None) -> Optional[str]:
    """The warm-started model's folder for `ctx`'s run (None when `trainer_common.sft.steps` is 0), starting from
    `model_path` (default: astuner.model.path, resolved)."""
    run = ctx.config
    s = run.astuner.trainer_common.sft
    if s.steps <= 0:
        return None
    out = ctx.run_dir.root.absolute() / FOLDER
    if (out / RECORD).exists():
        logger.info(f"SFT warm start: done before this resume, its weights reused ({out / 'model'})")
        return str(out / "model")
    import torch
    from transformers import AutoModelForCausalLM

    from astuner.backbone.debug import sft
    from astuner.backbone.machine import cpu_mode
    from astuner.model.engines.factory import load_tokenizer
    from astuner.model.engines.hf import pad_id_of
    from astuner.model.model_path import resolve_model_path
    from astuner.model.precision import compute_dtype
    from astuner.rollout.manager import RolloutManager, build_judge
    from astuner.task_reader import build_task_reader

    a, tc = run.astuner, run.astuner.trainer_common
    model_path = model_path or resolve_model_path(a, run.extra_roots)
    device = "cpu" if cpu_mode(run) else "cuda"
    dtype = compute_dtype(tc.dtype, device)
    tokenizer = load_tokenizer(model_path)
    tasks = build_task_reader(a, run.extra_roots).train_tasks()
    judge = build_judge(ctx.plugins.judge, a)
    lora = " (every weight: the RL adapter then starts on them)" if a.model.lora is not None else ""
    logger.info(f"SFT warm start on {device}{lora}: the expert ({s.expert}) plays {s.demonstrations_per_task} "
                f"episode(s) of each of the {len(tasks)} training tasks through the workflow, then {s.steps} SFT steps")
    t0 = time.perf_counter()
    demos = asyncio.run(sft.play(lambda engine: RolloutManager(a, ctx.plugins.workflow, judge, engine, tokenizer),
                                 ctx.plugins.expert, tokenizer, tasks, s.demonstrations_per_task, s.min_reward))
    if not demos.samples:
        raise RunFailed(f"astuner.trainer_common.sft: none of the expert's {demos.episodes} episodes scored at least "
                        f"min_reward {s.min_reward} (mean reward {demos.expert_reward:.3f}); fix the expert or lower "
                        f"min_reward")
    t1 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(device)
    losses = sft.train(model, demos.samples, s.steps, s.lr, s.batch_size, tc.seed, pad_id_of(tokenizer),
                       tc.max_token_len_per_micro_batch, dtype, tc.optim.grad_clip)
    t2 = time.perf_counter()
    partial = out.with_name(FOLDER + ".partial")
    model.save_pretrained(partial / "model")
    copy_tokenizer(Path(model_path), partial / "model")
    record = {"demonstrations": len(demos.samples), "expert_episodes": demos.episodes,
              "kept_episodes": demos.kept_episodes, "expert_reward": demos.expert_reward, "loss_first": losses[0],
              "loss_last": losses[-1], "steps": len(losses), "time_demonstrations_s": t1 - t0, "time_sft_s": t2 - t1,
              "device": device, "from": model_path}
    (partial / RECORD).write_text(json.dumps(record, indent=1), encoding="utf-8")
    if out.exists():  # a warm start killed before its record: begun again
        import shutil

        shutil.rmtree(out)
    partial.rename(out)  # whole or not at all: a resume reuses only a finished one
    del model
    torch.cuda.empty_cache()  # the devices are the backbone's now (nothing to free on the CPU)
    logger.info(f"SFT warm start: {len(demos.samples)} demonstrations from {demos.kept_episodes}/{demos.episodes} "
                f"expert episodes (expert reward {demos.expert_reward:.3f}), {len(losses)} steps, loss "
                f"{losses[0]:.3f} -> {losses[-1]:.3f} in {t2 - t1:.0f} s; the backbone starts from {out / 'model'}")
    return str(out / "model")
