"""Token-level trajectory records (`trajectories/step_N.tokens.jsonl.gz`), what the trajectory viewer shows
of each training sample: its token ids and the text each one reads as, the loss mask over the whole sequence
(prompt tokens 0), the engine's log-prob of each generated token, the trainer's log-prob of it before the
step's update, and the sample's advantage. One JSON line per sample, keyed by episode uuid and sample index.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any, Iterable, Optional

from astuner.schema import Sample


class TokenPieces:
    """The text of each token id on its own (cached: a run uses a small part of the vocabulary)."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.cache: dict[int, str] = {}

    def __call__(self, ids: list[int]) -> list[str]:
        missing = [i for i in set(ids) if i not in self.cache]
        if missing:
            for i, text in zip(missing, self.tokenizer.batch_decode([[i] for i in missing])):
                self.cache[i] = text
        return [self.cache[i] for i in ids]


def token_record(episode_uuid: str, index: int, sample: Sample, pieces: TokenPieces) -> dict[str, Any]:
    prompt = sample.prompt_length

    def full(values: Optional[list[float]]) -> Optional[list[Optional[float]]]:
        """A response-part list over the whole sequence: None on the prompt and on tokens not generated."""
        if values is None:
            return None
        return [None] * prompt + [round(v, 5) if m else None for v, m in zip(values, sample.loss_mask)]

    return {"episode_uuid": episode_uuid, "sample": index, "input_ids": sample.input_ids,
            "pieces": pieces(sample.input_ids), "prompt_length": prompt,
            "loss_mask": [0] * prompt + list(sample.loss_mask), "rollout_logprobs": full(sample.logprobs),
            "trainer_logprobs": full(sample.trainer_logprobs), "advantage": sample.advantage, "agent": sample.agent}


def write_token_records(folder: Path, step: int, records: Iterable[dict[str, Any]]) -> Optional[Path]:
    """Written whole to a temporary name, then renamed: a viewer reading a live run never sees half a file."""
    records = list(records)
    if not records:
        return None
    path = Path(folder) / f"step_{step}.tokens.jsonl.gz"
    partial = path.with_name(path.name + ".partial")
    with gzip.open(partial, "wt", encoding="utf-8", compresslevel=6) as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    os.replace(partial, path)
    return path


def read_token_records(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
