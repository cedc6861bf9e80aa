"""In-process transformers engine with request batching.

Concurrent `generate` calls are gathered (every request that is ready, plus `batch_wait_ms` if set) and
decoded together (up to `max_num_seqs` per batch) with a KV cache, so many episodes share each forward pass.
The batch's common prompt prefix (an agent's system prompt and tool schemas) is prefilled once and its cache
shared by every row; each row's own rest is left-padded after it, with position ids from the attention mask,
so a row sees the same positions as it would alone. Rows that finished leave the batch as it decodes. The
model runs in a worker thread; the event loop stays free for the episodes. On the CPU its speed on a busy machine
depends on OpenMP's wait policy (astuner.model.openmp): an engine in a process whose OpenMP threads spin says so.

Over a peft model with several LoRA adapters (several policies on one base), each request names its adapter
and a batch mixes them: peft applies each row's own adapter (`adapter_names`); the shared prefix is then used only
when every row of the batch has the same adapter. `AdapterRoute` is one policy's view of such an engine.
"""

from __future__ import annotations

import asyncio
import inspect
import concurrent.futures
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from astuner.model.engines.base import GenerateResult, SamplingParams


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future
    adapter: Optional[str] = None  # the LoRA adapter that samples it (None: the model as it is)


class HFEngine:
    def __init__(self, model: Any, stop_token_ids: Iterable[int], pad_token_id: int, max_num_seqs: int = 64,
                 batch_wait_ms: float = 0.0, seed: int = 0, dtype: str = "fp32", min_shared_prefix: int = 16):
        import torch

        self.model = model
        # the forward's KV-cache argument (and output field): `cache` from transformers 5.11 on, where
        # `past_key_values` is its deprecated alias; `past_key_values` before (verl's environment)
        self.cache_key = cache_keyword(model)
        self.dtype = dtype  # the forward passes' compute dtype (astuner.model.precision), as the trainer's
        self.stop_token_ids = set(int(t) for t in stop_token_ids)
        self.pad_token_id = int(pad_token_id)
        self.max_num_seqs = max_num_seqs
        self.batch_wait_s = batch_wait_ms / 1000.0
        # on the CPU whatever the model's device: sample_next draws its uniforms there (the same for a seed
        # everywhere) and moves them to the logits
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        self._pending: list[_Request] = []
        self._wakeup: Optional[asyncio.Event] = None
        self._worker: Optional[asyncio.Task] = None
        self._model_lock = threading.Lock()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="astuner-hf-engine")
        self.min_shared_prefix = min_shared_prefix
        self.stats = {"batches": 0, "sequences": 0, "generated_tokens": 0, "shared_prefix_tokens": 0,
                      "compactions": 0}
        note_spinning_threads(model)

    @classmethod
    def from_pretrained(cls, path: str, tokenizer: Any, max_num_seqs: int = 64, batch_wait_ms: float = 0.0,
                        seed: int = 0, device: Optional[str] = None) -> "HFEngine":
        import torch
        from transformers import AutoModelForCausalLM

        # an engine that only generates (no trainer shares its module): bf16 weights on a GPU, fp32 on the CPU
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
        return cls(model, stop_token_ids_of(tokenizer, model), pad_id_of(tokenizer), max_num_seqs, batch_wait_ms, seed)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams,
                       adapter: Optional[str] = None) -> GenerateResult:
        if not prompt_ids:
            raise ValueError("generate() needs at least one prompt token")
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
            self._wakeup = asyncio.Event()
            self._pending = []
            self._worker = loop.create_task(self._serve())
        request = _Request(list(prompt_ids), sampling, loop.create_future(), adapter)
        self._pending.append(request)
        self._wakeup.set()
        return await request.future

    async def update_weights(self, state_dict: Any, strict: bool = True) -> None:
        """`strict=False`: `state_dict` holds some of the weights (a policy's trainable ones)."""
        if state_dict is None:
            return
        with self._model_lock:
            self.model.load_state_dict(state_dict, strict=strict)

    async def _serve(self) -> None:
        while True:
            await self._wakeup.wait()
            await self._gather()
            batch = self._pending[: self.max_num_seqs]
            self._pending = self._pending[self.max_num_seqs:]
            if not self._pending:
                self._wakeup.clear()
            batch = [r for r in batch if not r.future.cancelled()]
            if not batch:
                continue
            try:
                # on the engine's own thread: never queued behind workflows or other to_thread users
                results = await asyncio.get_running_loop().run_in_executor(
                    self._executor, self._generate_batch, [r.prompt_ids for r in batch], [r.sampling for r in batch],
                    [r.adapter for r in batch])
            except Exception as exc:  # surface to every caller of this batch
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(exc)
                continue
            for r, result in zip(batch, results):
                if not r.future.done():
                    r.future.set_result(result)

    async def _gather(self) -> None:
        """Let every coroutine that is ready reach its generate() call: yield to the event loop until the
        queue stops growing (this does not depend on the clock, so batches are the same run after run),
        then wait `batch_wait_ms` more if set."""
        stable, previous = 0, -1
        for _ in range(200):
            await asyncio.sleep(0)
            size = len(self._pending)
            stable = stable + 1 if size == previous else 0
            previous = size
            if stable >= 3 or size >= self.max_num_seqs:
                break
        if self.batch_wait_s > 0:
            await asyncio.sleep(self.batch_wait_s)

    def _generate_batch(self, prompts: list[list[int]], samplings: list[SamplingParams],
                        adapters: Optional[list[Optional[str]]] = None) -> list[GenerateResult]:
        import torch

        from astuner.model.logits import last_logits_kwargs
        from astuner.model.precision import autocast
        from astuner.model.engines.sampling import request_generators, row_uniforms, sample_next

        with self._model_lock, torch.no_grad():
            device = next(self.model.parameters()).device
            batch = len(prompts)
            keep = last_logits_kwargs(self.model, 1)
            # each row's LoRA adapter, when any is named ("__base__" is peft's name for none)
            names = [a or "__base__" for a in adapters] if adapters and any(adapters) else None
            # the prompts' common prefix (an agent's system prompt and tool schemas) is computed once, its KV
            # cache repeated for every row; each row then prefills only its own rest (one adapter only: the
            # prefix's cache depends on the adapter)
            shared = shared_prefix_length(prompts, self.min_shared_prefix) if not names or len(set(names)) == 1 else 0
            past = None
            if shared:
                with autocast(device, self.dtype):
                    past = getattr(self.model(input_ids=torch.tensor([prompts[0][:shared]], device=device),
                                              use_cache=True, **keep,
                                              **({"adapter_names": names[:1]} if names else {})), self.cache_key)
                past.batch_repeat_interleave(batch)
                self.stats["shared_prefix_tokens"] += shared * (batch - 1)
            rests = [p[shared:] for p in prompts]
            width = max(len(r) for r in rests)
            # left-padded rests after the shared prefix: padding may sit between prefix and rest, masked out;
            # position ids from the mask, so every row sees the positions it would alone
            input_ids = torch.full((batch, width), self.pad_token_id, dtype=torch.long)
            attention = torch.zeros((batch, shared + width), dtype=torch.long)
            attention[:, :shared] = 1
            for i, r in enumerate(rests):
                input_ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
                attention[i, shared + width - len(r):] = 1
            input_ids, attention = input_ids.to(device), attention.to(device)
            positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, shared:]
            temperature = torch.tensor([s.temperature for s in samplings], dtype=torch.float32, device=device)
            top_p = None if all(s.top_p >= 1.0 for s in samplings) else torch.tensor(
                [s.top_p for s in samplings], dtype=torch.float32, device=device)
            limits = [s.max_tokens for s in samplings]
            # a request with a seed draws from its own generator: its tokens do not depend on its batch
            generators = request_generators([s.seed for s in samplings])
            with autocast(device, self.dtype):
                out = self.model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                                 **{self.cache_key: past}, use_cache=True, **keep,
                                 **({"adapter_names": names} if names else {}))
            past = getattr(out, self.cache_key)
            logits = out.logits[:, -1, :].float()
            tokens_out: list[list[int]] = [[] for _ in range(batch)]
            logprobs_out: list[list[float]] = [[] for _ in range(batch)]
            reasons = ["length"] * batch
            done = [limit <= 0 for limit in limits]
            rows = list(range(batch))  # the original row of each row still in the batch
            next_pos = positions[:, -1:]
            while not all(done[i] for i in rows):
                uniform = None if generators is None else row_uniforms([generators[i] for i in rows], self.generator)
                tokens, lps = sample_next(logits, temperature, top_p, self.generator, uniform)
                tokens_cpu, lps_cpu = tokens.tolist(), lps.tolist()
                for j, i in enumerate(rows):
                    if done[i]:
                        continue
                    tokens_out[i].append(tokens_cpu[j])
                    logprobs_out[i].append(lps_cpu[j])
                    if tokens_cpu[j] in self.stop_token_ids:
                        done[i], reasons[i] = True, "stop"
                    elif len(tokens_out[i]) >= limits[i]:
                        done[i] = True
                finished = sum(done[i] for i in rows)
                if finished == len(rows):
                    break
                if finished * 4 >= len(rows):
                    # a quarter of the rows finished: drop them from the batch (and their KV cache), so a few
                    # long answers do not keep paying for every row that already stopped
                    keep_rows = [j for j, i in enumerate(rows) if not done[i]]
                    index = torch.tensor(keep_rows, dtype=torch.long, device=device)
                    past.batch_select_indices(index)
                    attention, next_pos, tokens = attention[index], next_pos[index], tokens[index]
                    temperature = temperature[index]
                    top_p = top_p[index] if top_p is not None else None
                    names = [names[j] for j in keep_rows] if names else None
                    rows = [rows[j] for j in keep_rows]
                    self.stats["compactions"] += 1
                attention = torch.cat([attention, torch.ones((len(rows), 1), dtype=attention.dtype, device=device)],
                                      -1)
                next_pos = next_pos + 1
                with autocast(device, self.dtype):
                    out = self.model(input_ids=tokens[:, None], attention_mask=attention, position_ids=next_pos,
                                     **{self.cache_key: past}, use_cache=True,
                                     **({"adapter_names": names} if names else {}))
                past = getattr(out, self.cache_key)
                logits = out.logits[:, -1, :].float()
            self.stats["batches"] += 1
            self.stats["sequences"] += batch
            self.stats["generated_tokens"] += sum(len(t) for t in tokens_out)
            return [GenerateResult(t, lp, r) for t, lp, r in zip(tokens_out, logprobs_out, reasons)]


def cache_keyword(model: Any) -> str:
    """`cache` where the model's forward (a peft model's base model's) takes it, else `past_key_values`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


class AdapterRoute:
    """One policy's view of an hf engine over a multi-adapter peft model: its calls are sampled with its adapter.
    The engine, its sampler and its weights are the shared ones (nothing to push after an update)."""

    def __init__(self, engine: HFEngine, adapter: str):
        self.engine, self.adapter = engine, adapter
        self.model, self.generator = engine.model, engine.generator

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> GenerateResult:
        return await self.engine.generate(prompt_ids, sampling, adapter=self.adapter)

    async def update_weights(self, state_dict: Any) -> None:
        if state_dict is not None:
            raise ValueError("an adapter route shares its engine's weights; there is nothing to load")


def shared_prefix_length(prompts: list[list[int]], minimum: int) -> int:
    """Length of the prompts' common prefix, leaving every prompt at least one token of its own (its last
    position's logits come from its own pass); 0 when there is a single prompt or the prefix is shorter than
    `minimum` (an extra forward pass would cost more than it saves)."""
    if len(prompts) < 2 or minimum <= 0:
        return 0
    # the common prefix of all is that of the lexicographically first and last (list comparison runs in C)
    low, high = min(prompts), max(prompts)
    limit = min(min(len(p) for p in prompts) - 1, len(low))
    length = 0
    while length < limit and low[length] == high[length]:
        length += 1
    return length if length >= minimum else 0


_SPINNING_NOTED = False


def note_spinning_threads(model: Any) -> bool:
    """An engine computing on the CPU in a process whose OpenMP threads spin while they wait (torch imported before
    a wait policy was set, astuner.model.openmp): one warning per process, saying what to set. True when it warns."""
    global _SPINNING_NOTED
    from astuner.model.openmp import SPINNING_NOTE, threads_spin_while_waiting

    parameter = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    if _SPINNING_NOTED or parameter is None or parameter.device.type != "cpu" or not threads_spin_while_waiting():
        return False
    from loguru import logger

    _SPINNING_NOTED = True
    logger.warning(SPINNING_NOTE)
    return True


def stop_token_ids_of(tokenizer: Any, model: Any = None) -> list[int]:
    """End-of-turn ids: the tokenizer's eos plus the model's generation_config eos ids."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, (list, tuple)):
        ids.update(int(e) for e in eos)
    vocab = tokenizer.get_vocab()
    ids.update(int(vocab[token]) for token in ("<|im_end|>", "<|eot_id|>") if token in vocab)  # end-of-turn tokens
    if not ids:
        raise ValueError("the tokenizer defines no end-of-sequence token; set eos_token in its tokenizer_config.json")
    return sorted(ids)


def pad_id_of(tokenizer: Any) -> int:
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    return int(tokenizer.eos_token_id)
