"""Test doubles: a scripted engine whose token ids are deliberately not the tokenizer's canonical
encoding (so any re-tokenization would show), and a call recorder builder."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Optional, Union

from astuner.model.engines.base import GenerateResult, SamplingParams


def rollout_config(**rollout: Any) -> Any:
    """An AstunerConfig for a RolloutManager in a unit test: 3 repeats, 4 workers, `rollout` keys set on top."""
    from astuner.config.schema import AstunerConfig

    cfg = AstunerConfig()
    settings = {"num_repeat": 3, "max_env_worker": 4, "episode_timeout_s": 5.0, "max_model_len": 4096,
                "max_response_length_in_one_turn": 64, **rollout}
    for key, value in settings.items():
        setattr(cfg.rollout, key, value)
    return cfg


def captured_logs(level: str) -> tuple[list[str], int]:
    """(the lines loguru logs at `level` and above from now on, the sink's id for logger.remove)."""
    from loguru import logger

    lines: list[str] = []
    return lines, logger.add(lambda m: lines.append(str(m)), level=level, format="{message}")


def char_level_ids(tokenizer: Any, text: str) -> list[int]:
    """Token ids for `text`, one character at a time: decodes to `text` but differs from encode(text)."""
    return [i for ch in text for i in tokenizer.encode(ch, add_special_tokens=False)]


class ScriptedEngine:
    """Replies with scripted texts (a list, or a function of the prompt text) as char-level ids + end token."""

    def __init__(self, tokenizer: Any, replies: Union[list[str], Callable[[str], str]], delay_s: float = 0.0,
                 finish_reason: str = "stop"):
        self.tokenizer = tokenizer
        self.replies = replies if callable(replies) else list(replies)
        self.delay_s = delay_s
        self.finish_reason = finish_reason
        self.end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.prompts: list[list[int]] = []
        self.outputs: list[list[int]] = []
        self.samplings: list[SamplingParams] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> GenerateResult:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            prompt_text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
            text = self.replies(prompt_text) if callable(self.replies) else self.replies.pop(0)
            ids = char_level_ids(self.tokenizer, text)
            if self.finish_reason == "stop":
                ids.append(self.end_id)
            logprobs = [-0.01 * (k + 1) for k in range(len(ids))]
            self.prompts.append(list(prompt_ids))
            self.outputs.append(ids)
            self.samplings.append(sampling)
            return GenerateResult(ids, logprobs, self.finish_reason)
        finally:
            self.in_flight -= 1

    async def update_weights(self, state_dict: Optional[Any]) -> None:
        return None


class LoopbackJSONServer:
    """A JSON-over-HTTP server on 127.0.0.1 for tests: `handler(path, body) -> (status, answer)`."""

    def __init__(self, handler: Callable[[str, dict], tuple[int, Any]]):
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        outer = self
        self.requests: list[tuple[str, dict]] = []
        self.headers: list[dict[str, str]] = []  # each request's headers, in the same order

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                outer.requests.append((self.path, body))
                outer.headers.append(dict(self.headers))
                status, answer = handler(self.path, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "LoopbackJSONServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def prepare_seed_run(prepare: Callable[[Any], Any], tmp_path: Any, model_dir: Any, gsm8k_dir: Any,
                     extra_overrides: tuple[str, ...] = ()) -> tuple[Any, Any, Any]:
    """The contract's math agent pointed at a tiny local model and GSM8K, its config.yaml written into a run
    folder, and a distributed backbone's `prepare(ctx)` run on it. Returns (run config, run root, prepare's result).
    The caller has chdir'ed to the repository root."""
    from types import SimpleNamespace

    from astuner.config import load_run_config
    from astuner.records.run_dir import RunDir, dump_config
    from tests.conftest import REPO_ROOT

    run = load_run_config(REPO_ROOT / "tutorial" / "example_math_agent" / "math_agent.yaml",
                          [f"astuner.model.path={model_dir}",
                           f"astuner.task_reader.huggingface_dat_repo.dataset_path={gsm8k_dir}",
                           "astuner.rollout.max_model_len=4096", "astuner.data.max_prompt_length=3000",
                           "astuner.data.max_response_length=1000", *extra_overrides])
    root = tmp_path / "run"
    root.mkdir()
    (root / "config.yaml").write_text(dump_config(run.merged))
    ctx = SimpleNamespace(config=run, run_dir=RunDir(root=root, resumed=False), with_ray=False)
    return run, root, prepare(ctx)


def scalars(folder: Any) -> dict[str, dict[int, float]]:
    """A tensorboard folder's scalars: tag -> {step: value}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


# (group, reward) rows for comparing GRPO advantages with a backbone's own: a mixed group, a two-value group,
# a group of one, a group whose rewards are all equal
GRPO_ROWS = [("a", 1.0), ("a", 0.0), ("a", 0.0), ("a", 1.0), ("b", 2.0), ("b", 4.0), ("c", 0.7),
             ("d", 1.0), ("d", 1.0), ("d", 1.0)]


def our_grpo_advantages(norm_by_std: bool) -> list[float]:
    """astuner's GRPO advantages (the debug backbone's) for GRPO_ROWS, one sample per episode."""
    from astuner.algorithm.advantages import assign_advantages
    from astuner.schema import Sample

    samples = [Sample(task_id=group, episode_uuid=f"e{i}", repeat_index=0, input_ids=[1, 2], prompt_length=1,
                      loss_mask=[1], logprobs=[0.0], reward=reward) for i, (group, reward) in enumerate(GRPO_ROWS)]
    assign_advantages(samples, "grpo", norm_by_std)
    return [s.advantage for s in samples]
