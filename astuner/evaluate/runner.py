"""One evaluation: each candidate model plays the config's workflow, judged by its judge, `k` episodes on each task
of a split, through the same rollout code as training (`RolloutManager`: the episodes, retries, the gateway for
agents with their own client, the judge, the trajectories' rows). Every candidate gets the same tasks, the same
episode ids and an engine seeded the same (`rollout.seed`), so two models' episodes pair task by task.

Local models run on the engine the config names (hf, or vllm where installed; a config's `openai` engine is for
training against a server, so a local candidate runs on hf); a LoRA adapter runs merged into its base (hf in
memory, vllm from a merged folder in the output). An endpoint runs through `EndpointTuner`."""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from loguru import logger

from astuner.errors import ConfigError, DataError
from astuner.evaluate.candidates import Candidate
from astuner.rollout.manager import EpisodeResult, RolloutManager, build_judge
from astuner.rollout.row_problems import RowProblems


PROGRESS_EVERY_S = 15.0  # without a terminal: a progress line (done, mean reward, ETA) at most this often


@dataclass
class Evaluated:
    candidate: Candidate
    episodes: list[EpisodeResult]
    wall_s: float
    tokenizer: Any = None  # the local model's (its trajectories' tokens); None for an endpoint
    notes: list[str] = field(default_factory=list)
    unreached: list[str] = field(default_factory=list)  # an endpoint's calls that could not reach it


def split_tasks(cfg: Any, extra_roots: list[Any], split: str, limit: Optional[int]) -> list[Any]:
    """The split's tasks, in the reader's order, the first `limit` of them."""
    from astuner.task_reader import build_task_reader

    reader = build_task_reader(cfg, extra_roots)
    tasks = reader.val_tasks() if split == "val" else reader.train_tasks()
    if not tasks:
        other = "train" if split == "val" else "val"
        raise DataError(f"the config's {'validation' if split == 'val' else 'training'} split holds no tasks; "
                        f"evaluate on --split {other}, or name a {split} file in astuner.task_reader")
    return tasks[:limit] if limit else tasks


def load_local(cfg: Any, candidate: Candidate, out: Path) -> tuple[Any, Any]:
    """(engine, tokenizer) of a local candidate: its weights on the config's engine."""
    from astuner.backbone.debug import lora
    from astuner.model.engines.factory import build_engine, load_tokenizer, pick_engine

    folder = candidate.folder
    assert folder is not None
    tokenizer = load_tokenizer(str(folder), f"--model {candidate.label}")
    vllm = pick_engine(cfg) == "vllm"
    ro = cfg.rollout
    if lora.is_adapter_folder(folder):
        if not vllm:
            return _merged_hf(cfg, folder, tokenizer), tokenizer
        merged = out / "merged" / candidate.label.replace("/", "_")
        merged.parent.mkdir(parents=True, exist_ok=True)
        folder = lora.merge_checkpoint(folder, merged)
    if vllm:
        return build_engine(cfg, tokenizer, model_path=str(folder)), tokenizer
    from safetensors import SafetensorError

    from astuner.model.engines.hf import HFEngine

    try:
        engine = HFEngine.from_pretrained(str(folder), tokenizer, ro.max_num_seqs, ro.batch_wait_ms, ro.seed)
    except (OSError, ValueError, SafetensorError) as exc:  # a folder without (readable) weights, a damaged file
        first = (str(exc).strip().splitlines() or [""])[0][:150]
        raise DataError(f"--model {candidate.label}: cannot load a model from {folder} ({type(exc).__name__}: "
                        f"{first})") from None
    return engine, tokenizer


def _merged_hf(cfg: Any, folder: Path, tokenizer: Any) -> Any:
    """An hf engine over the adapter merged into its base (the base its adapter_config.json names)."""
    import torch
    from transformers import AutoModelForCausalLM

    from astuner.backbone.debug import lora
    from astuner.model.engines.hf import HFEngine, pad_id_of, stop_token_ids_of

    base = lora.adapter_config(folder).get("base_model_name_or_path")
    if not base:
        raise DataError(f"--model {folder}: its adapter_config.json names no base model (base_model_name_or_path)")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    try:
        model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
    except OSError as exc:
        raise DataError(f"--model {folder}: cannot load its base model {base!r} ({str(exc).splitlines()[0][:120]})"
                        ) from None
    model = lora.load_adapter(model, folder, False).merge_and_unload().to(device).eval()
    ro = cfg.rollout
    return HFEngine(model, stop_token_ids_of(tokenizer, model), pad_id_of(tokenizer), ro.max_num_seqs,
                    ro.batch_wait_ms, ro.seed)


def evaluate_candidate(config: Any, plugins: Any, candidate: Candidate, tasks: list[Any], k: int, split: str,
                       out: Path, auxiliary: dict[str, Any]) -> Evaluated:
    """`candidate`'s k episodes of each task, with a progress bar and its ETA."""
    from astuner.records.progress import Progress

    cfg = config.astuner
    if candidate.is_endpoint:
        from astuner.model.endpoint_tuner import Endpoint, EndpointTuner

        engine, tokenizer = None, None
        endpoint = Endpoint(candidate.base_url, candidate.model, candidate.api_key_env)
        tuner = functools.partial(EndpointTuner, endpoint=endpoint)
    else:
        engine, tokenizer = load_local(cfg, candidate, out)
        tuner = None
    manager = RolloutManager(cfg, plugins.workflow, build_judge(plugins.judge, cfg), engine, tokenizer,
                             auxiliary_models=auxiliary, row_problems=RowProblems(), tuner=tuner,
                             builds_samples=tokenizer is not None)
    bar = Progress(len(tasks) * k, f"eval {candidate.label}", unit="episode", every_s=PROGRESS_EVERY_S)
    rewards: list[float] = []

    def done(result: EpisodeResult) -> None:
        rewards.append(result.reward)
        bar.update(1, reward=f"{sum(rewards) / len(rewards):.3f}")

    loop = asyncio.new_event_loop()
    started = time.perf_counter()
    try:
        batch = loop.run_until_complete(manager.run(tasks, "val", num_repeat=k, tag=f"eval:{split}",
                                                    check_error_rate=False, on_episode=done))
    finally:
        bar.close()
        shutdown = getattr(engine, "shutdown", None)
        if shutdown is not None:
            shutdown()
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()
    wall = time.perf_counter() - started
    summary = manager.row_problems.summary()
    evaluated = Evaluated(candidate, batch.episodes, wall, tokenizer, [summary] if summary else [],
                          endpoint.unreached if candidate.is_endpoint else [])
    failed = [e for e in batch.episodes if e.failed]
    logger.info(f"eval {candidate.label}: {len(batch.episodes)} episodes in {wall:.0f} s, reward "
                f"{sum(rewards) / max(len(rewards), 1):.3f}")
    if failed:
        lines = (failed[0].error or "").strip().splitlines()
        logger.warning(f"eval {candidate.label}: {len(failed)} of {len(batch.episodes)} episodes failed (scored 0); "
                       f"the first: {lines[-1][:200] if lines else 'unknown'} (tracebacks in {out / 'eval.log'})")
    return evaluated


def check_endpoints(candidates: list[Candidate]) -> None:
    """One small request to each endpoint (a one-token reply): a wrong URL, key or model name is one line now,
    not a failed episode each later."""
    import openai

    from astuner.model.endpoint_tuner import Endpoint

    for candidate in candidates:
        if not candidate.is_endpoint:
            continue
        endpoint = Endpoint(candidate.base_url, candidate.model, candidate.api_key_env)
        client = openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, timeout=60, max_retries=0)
        try:
            client.chat.completions.create(model=candidate.model, max_tokens=1,
                                           messages=[{"role": "user", "content": "Say OK."}])
        except openai.APIConnectionError:
            raise DataError(f"--model {candidate.label}: cannot reach {candidate.base_url} (is the server up, is "
                            f"the URL its /v1?)") from None
        except openai.APIStatusError as exc:
            why = {401: "the key was refused", 403: "the key may not use it",
                   404: f"no model {candidate.model!r} there (or no chat completions at this URL)"}
            message = str(getattr(exc, "message", exc)).splitlines()[0][:160]
            raise DataError(f"--model {candidate.label}: {candidate.base_url} answered HTTP {exc.status_code}: "
                            f"{why.get(exc.status_code, message)}") from None
        finally:
            client.close()


def check_config(config: Any) -> None:
    """What an evaluation of one model cannot do with this config."""
    cfg = config.astuner
    if cfg.policies:
        raise ConfigError(f"astuner eval evaluates one model serving every agent; this config trains "
                          f"{len(cfg.policies)} policies (astuner.policies): evaluate each policy's checkpoint "
                          f"with a config of one policy")
