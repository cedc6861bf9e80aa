"""What the viewer reads from a run folder: metrics.jsonl, trajectories/step_N.jsonl (episodes) and
trajectories/step_N.tokens.jsonl.gz (their samples token by token). Every path is built here from a step
number and fixed names — nothing a request names is ever opened as a path."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any, Iterable, Optional


STEP_FILE = re.compile(r"^step_(\d+)\.jsonl$")
CURVES = ("reward/mean", "reward/success_rate", "val/reward_mean", "sft/val_reward_before", "rollout/error_rate", "rollout/madness_rate",
          "rollout/truncated_rate", "rollout/tool_parse_failures", "actor/kl", "actor/clip_frac", "actor/rollout_logprob_diff", "actor/entropy",
          "actor/grad_norm", "perf/time_step_s")


def json_rows(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The JSON objects among `lines`: a line cut short (a live run writing it, a crash), one that is no JSON or
    no object (`7`, `[1, 2]`) is left out; NaN and Infinity become null (the page's JSON has no such numbers)."""
    rows = []
    for line in lines:
        try:
            row = json.loads(line, parse_constant=lambda name: None)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


class RunFileError(Exception):
    """A run file that cannot be read at all (the viewer answers 500 naming it)."""


class RunData:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.trajectories = self.root / "trajectories"

    def _read(self, path: Path, gz: bool = False) -> list[dict[str, Any]]:
        if not path.is_file():
            return []
        try:
            data = path.read_bytes()
            if gz:
                data = _gunzip_prefix(data)
        except OSError as exc:
            raise RunFileError(f"{path.relative_to(self.root)} cannot be read: {exc.strerror or exc}") from None
        return json_rows(data.decode("utf-8", errors="replace").splitlines())

    def _jsonl(self, path: Path) -> list[dict[str, Any]]:
        return self._read(path)

    def steps(self) -> list[int]:
        if not self.trajectories.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.trajectories.iterdir() if (m := STEP_FILE.match(p.name)))

    def run(self) -> dict[str, Any]:
        metrics = self._jsonl(self.root / "metrics.jsonl")
        keys = [k for k in CURVES if any(k in row for row in metrics)]
        extra = sorted({k for row in metrics for k in row if k.startswith("rollout/") and k.endswith("_rate")}
                       - set(keys))
        out = {"name": self.root.name, "path": str(self.root), "steps": self.steps(), "curves": keys + extra,
               "metrics": [{k: row.get(k) for k in ["step", *keys, *extra] if k in row} for row in metrics]}
        evaluation = self.evaluation()
        if evaluation is not None:  # an `astuner eval` folder: model i's episodes are step i
            out["labels"] = {str(m["step"]): m["label"] for m in evaluation["models"]}
            out["eval"] = evaluation
        return out

    def evaluation(self) -> Optional[dict[str, Any]]:
        """An evaluation folder's eval.json (astuner eval), its per-task figures left out; None elsewhere."""
        path = self.root / "eval.json"
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"), parse_constant=lambda name: None)
        except (OSError, UnicodeDecodeError, ValueError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("models"), list):
            return None
        models = [m for m in data["models"] if isinstance(m, dict) and isinstance(m.get("step"), int)
                  and isinstance(m.get("label"), str)]
        return {**{k: v for k, v in data.items() if k != "models"},
                "models": [{k: v for k, v in m.items() if k != "per_task"} for m in models]}

    def episodes(self, step: int) -> list[dict[str, Any]]:
        return self._jsonl(self.trajectories / f"step_{int(step)}.jsonl")

    def step(self, step: int) -> Optional[dict[str, Any]]:
        rows = self.episodes(step)
        if not rows and int(step) not in self.steps():
            return None
        table, groups = [], {}
        for row in rows:
            samples = [s for s in row.get("samples") or [] if isinstance(s, dict)] \
                if isinstance(row.get("samples"), list) else []
            table.append({"task_id": row.get("task_id"), "repeat_index": row.get("repeat_index"),
                          "episode_uuid": row.get("episode_uuid"), "reward": row.get("reward"),
                          "advantage": row.get("advantage"), "is_success": row.get("is_success"),
                          "failed": row.get("failed"), "madness": row.get("madness") or [],
                          "truncated": row.get("truncated"), "calls": row.get("calls"),
                          "tool_errors": row.get("tool_parse_failures"), "attempts": row.get("attempts"),
                          "group_dropped": row.get("group_dropped"), "policy_version": row.get("policy_version"),
                          "tokens": sum(s["response_tokens"] for s in samples
                                        if isinstance(s.get("response_tokens"), (int, float))) or row.get("response_tokens")})
            groups.setdefault(str(row.get("task_id")), []).append(row.get("reward"))
        stats = {}
        for task, rewards in groups.items():
            values = [r for r in rewards if isinstance(r, (int, float))]
            stats[task] = {"n": len(rewards), "mean": statistics.fmean(values) if values else None,
                           "std": statistics.pstdev(values) if len(values) > 1 else 0.0 if values else None}
        label = next((m["label"] for m in (self.evaluation() or {"models": []})["models"] if m["step"] == int(step)),
                     None)
        return {"step": int(step), "episodes": table, "groups": stats, **({"label": label} if label else {})}

    def episode(self, step: int, uuid: str) -> Optional[dict[str, Any]]:
        row = next((r for r in self.episodes(step) if r.get("episode_uuid") == uuid), None)
        if row is None:
            return None
        path = self.trajectories / f"step_{int(step)}.tokens.jsonl.gz"
        samples = [r for r in self._read(path, gz=True) if r.get("episode_uuid") == uuid]
        order = lambda r: r["sample"] if isinstance(r.get("sample"), int) else 0  # noqa: E731
        return {"step": int(step), "episode": row, "samples": sorted(samples, key=order)}


def _gunzip_prefix(data: bytes) -> bytes:
    """What a gzip file holds up to where it is cut short or damaged (a live run still writing it, a crash)."""
    import zlib

    inflater, out = zlib.decompressobj(16 + zlib.MAX_WBITS), []
    for start in range(0, len(data), 1 << 16):
        try:
            out.append(inflater.decompress(data[start:start + (1 << 16)]))
        except zlib.error:
            break
    return b"".join(out)


class StoreData(RunData):
    """A trace store (astuner serve, astuner traces import) as the viewer shows a run: its episodes are one step (1),
    each with its reward, calls and tokens, its conversation (the last call's messages and reply, and each agent's
    when several); an episode id the page's URLs cannot carry is shown under an alias (`e<N>`). No token view: the
    store names no tokenizer."""

    SAFE_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")

    def _store(self) -> Any:
        from astuner.records.trace_store import TraceStore

        return TraceStore.read(self.root)

    def steps(self) -> list[int]:
        return [1]

    def run(self) -> dict[str, Any]:
        episodes = self.episodes(1)
        return {"name": self.root.name, "path": str(self.root), "steps": [1], "curves": [], "metrics": [],
                "labels": {"1": f"{len(episodes)} episodes"}}

    def _ids(self, store: Any) -> list[tuple[str, dict[str, Any]]]:
        """(the id the page uses, the episode) for each of the store's episodes, in its order."""
        return [(e["id"] if self.SAFE_ID.match(e["id"]) else f"e{n}", e) for n, e in enumerate(store.episodes())]

    def episodes(self, step: int) -> list[dict[str, Any]]:
        if int(step) != 1:
            return []
        store = self._store()
        return [self._row(alias, episode, store.calls(episode["id"])) for alias, episode in self._ids(store)]

    def episode(self, step: int, uuid: str) -> Optional[dict[str, Any]]:
        if int(step) != 1:
            return None
        store = self._store()
        found = next((e for alias, e in self._ids(store) if alias == uuid), None)  # only its calls are read
        if found is None:
            return None
        return {"step": 1, "episode": self._row(uuid, found, store.calls(found["id"])), "samples": []}

    @staticmethod
    def _row(alias: str, episode: dict[str, Any], calls: list[Any]) -> dict[str, Any]:
        from astuner.schema.calls import conversations

        last = calls[-1] if calls else None
        first = next((m.get("content") for c in calls for m in c.messages if m.get("role") == "user"), "")
        row = {"task_id": str(first or "")[:80], "repeat_index": 0, "episode_uuid": alias, "episode": episode["id"],
               "source": episode["source"], "reward": episode["reward"],
               "is_success": episode["reward"] is not None and episode["reward"] > 0, "failed": False,
               "madness": [], "truncated": any(c.finish_reason == "length" for c in calls), "calls": len(calls),
               "tool_parse_failures": sum(len(c.tool_call_errors) for c in calls),
               "response_tokens": sum(c.completion_tokens for c in calls),
               "messages": last.messages if last else [], "response": last.response_text if last else None,
               "metadata": {"feedback": episode["feedback"]} if episode["feedback"] else None}
        whole = conversations(calls)
        if len(whole) > 1:
            row["conversations"] = [{"agent": c.target, "policy": c.policy, "messages": c.messages,
                                     "response": c.response_text} for c in whole]
        return row


def is_trace_store(path: Path) -> bool:
    """A SQLite file (its header), which the viewer opens as a trace store."""
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False
