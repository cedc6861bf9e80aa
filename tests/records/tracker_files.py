"""Reading scalars back from the trackers' own offline files, with no network and no server: wandb's
`run-*.wandb` and swanlab's `run-*.swanlab` (both a LevelDB-style log of protobuf records), mlflow's file store."""

from __future__ import annotations

import json
import struct
import time
import zlib
from collections import defaultdict
from pathlib import Path

_BLOCK, _HEADER = 32768, 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def log_records(path: Path, magic: bytes):
    """Payloads of a LevelDB-log file after its 7-byte header (`magic` is its first four bytes)."""
    data = Path(path).read_bytes()
    assert data[:4] == magic, f"{path} does not start with {magic!r}"
    pos, pending = _HEADER, b""
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:
            pos += left
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + _HEADER])
        if kind == 0 and length == 0:
            pos += left
            continue
        chunk = data[pos + _HEADER:pos + _HEADER + length]
        if len(chunk) < length:
            break  # still being written
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF == crc, f"bad record in {path}"
        pos += _HEADER + length
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            yield pending + chunk
            pending = b""


def wandb_scalars(folder: Path, wait_s: float = 20.0) -> dict[str, list[tuple[int, float]]]:
    """{metric: [(step, value)]} of the one offline wandb run under `folder` (waits for its exit record)."""
    return _wandb_run(next(Path(folder).glob("wandb/offline-run-*/run-*.wandb")), wait_s)[1]


def wandb_runs(folder: Path, wait_s: float = 20.0) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """{run name: {metric: [(step, value)]}} of every offline wandb run under `folder`."""
    return dict(_wandb_run(path, wait_s) for path in sorted(Path(folder).glob("wandb/offline-run-*/run-*.wandb")))


def _wandb_run(path: Path, wait_s: float) -> tuple[str, dict[str, list[tuple[int, float]]]]:
    from wandb.proto import wandb_internal_pb2

    deadline = time.monotonic() + wait_s
    while True:
        out, exited, name = defaultdict(list), False, ""
        for payload in log_records(path, b":W&B"):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(payload)
            kind = record.WhichOneof("record_type")
            exited = exited or kind == "exit"
            if kind == "run":
                name = record.run.display_name or name
            if kind != "history":
                continue
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                value = json.loads(item.value_json)
                if not key.startswith("_") and isinstance(value, (int, float)) and not isinstance(value, bool):
                    out[key].append((int(record.history.step.num), float(value)))
        if exited or time.monotonic() > deadline:
            return name, dict(out)
        time.sleep(0.05)


def swanlab_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record

    path = next(Path(folder).glob("swanlog/run-*/run-*.swanlab"))
    out = defaultdict(list)
    for payload in log_records(path, b":SWL"):
        record = Record()
        record.ParseFromString(payload)
        if record.HasField("scalar"):
            out[record.scalar.key].append((int(record.scalar.step), float(record.scalar.value.number)))
    return dict(out)


def mlflow_scalars(folder: Path, experiment: str) -> dict[str, list[tuple[int, float]]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient((Path(folder) / "mlruns").absolute().as_uri())
    run = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])[0]
    return {k: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, k)] for k in run.data.metrics}
