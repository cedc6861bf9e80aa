"""Chat logs into a trace store, rendered through the chat template of the model that will be trained.

A log is JSON lines, one model call each, in either shape providers' logging writes:

- `{"messages": [..., {"role": "assistant", ...}], "tools": [...]}`: the conversation, its last message the
  model's reply (OpenAI's fine-tuning format);
- `{"request": {"messages": [...], "tools": [...]}, "response": {"choices": [{"message": {...}}]}}`: a request
  and the chat completion it got.

Optional fields on a line: `session_id` (or `episode`): the episode it belongs to (default: a line is an episode);
`reward`: the episode's reward (recorded as feedback). The call's prompt is the messages rendered with the
generation prompt; its reply is what the template adds for the reply message, up to and with the end of turn.
The log carries no token ids, so each call is checked to round-trip the tokenizer (astuner.model.chat.rerender);
an episode that fails is named in the report and still stored. Every line is checked before anything is written
(JSON, roles, a finite reward, at most `MAX_LINE_BYTES`, within the model's context); an episode with a line that
fails is left out whole, and each episode is written in one transaction. AgentScope Studio's trace database is read into
the same calls by astuner.traces.studio."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from astuner.errors import DataError
from astuner.model.chat.messages import normalize_messages, normalize_tools
from astuner.model.chat.rerender import EpisodeCheck, check_episode, summary
from astuner.records.trace_store import StoreFailed, TraceStore
from astuner.schema.calls import CallRecord


@dataclass
class LogCall:
    episode: str
    where: str  # where the log holds it, as a report names it ('line 3', 'span 5f0c...')
    messages: list[dict[str, Any]]
    tools: Optional[list[dict[str, Any]]]
    reply: dict[str, Any]
    reward: Optional[float] = None


@dataclass
class ImportReport:
    lines: int = 0  # the log's entries read (lines; a Studio database's spans of model calls)
    episodes: int = 0
    calls: int = 0
    rewards: int = 0
    skipped: list[str] = field(default_factory=list)  # 'line N: why' for lines that are no call (or 'span ...')
    checks: list[EpisodeCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the import left out of calls it kept

    def as_dict(self) -> dict[str, Any]:
        return {"lines": self.lines, "episodes": self.episodes, "calls": self.calls, "rewards": self.rewards,
                "skipped": self.skipped, "notes": self.notes, "check": summary(self.checks)}


MAX_LINE_BYTES = 32 << 20  # a call of a 128k-token context runs to a few MiB of JSON: a longer line is no call


def read_log(path: Path, max_line_bytes: int = MAX_LINE_BYTES) -> tuple[list[LogCall], list[str], int]:
    """The log's calls, 'line N: why' for each line that is none (not JSON, no messages, no reply, a reward that
    is no finite number, over `max_line_bytes`: never read whole), and the number of lines read."""
    if not path.is_file():
        raise DataError(f"{path}: " + ("a folder, not a chat log" if path.is_dir() else "not a file" if path.exists()
                                       else "no such file"))
    calls, skipped, broken, lines = [], [], set(), 0
    with open(path, "rb") as fh:
        n = 0
        while raw := fh.readline(max_line_bytes + 1):
            n += 1
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                while (rest := fh.readline(1 << 20)) and not rest.endswith(b"\n"):  # the rest dropped as it comes
                    pass
                lines += 1
                size = f"{max_line_bytes >> 20} MiB" if max_line_bytes >= 1 << 20 else f"{max_line_bytes} bytes"
                skipped.append(f"line {n}: over {size}, longer than any call (not read)")
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise DataError(f"{path}: not a text file (a chat log is JSON lines in UTF-8; a SQLite file is read "
                                f"as AgentScope Studio's database with --format studio or auto)") from None
            if not text.strip():
                continue
            lines += 1
            row = None
            try:
                row = json.loads(text)
                calls.append(parse_line(row, n))
            except (ValueError, TypeError, KeyError, IndexError, RecursionError) as exc:
                skipped.append(f"line {n}: {str(exc)[:160]}")
                if isinstance(row, dict) and (row.get("session_id") or row.get("episode")):
                    broken.add(str(row.get("session_id") or row.get("episode")))
    return (*drop_broken(calls, skipped, broken), lines)


def drop_broken(calls: list[LogCall], skipped: list[str], broken: set[str]) -> tuple[list[LogCall], list[str]]:
    """An episode is imported whole or not at all: one stored without a call could not be completed later (a
    second import skips an episode the store has)."""
    for episode in sorted(broken):
        dropped = [c for c in calls if c.episode == episode]
        if dropped:
            skipped.append(f"{dropped[0].where}: episode {episode!r} left out whole ({len(dropped)} other calls): a "
                           f"call of it is skipped above")
    return [c for c in calls if c.episode not in broken], skipped


def reply_message(reply: dict[str, Any]) -> dict[str, Any]:
    """The model's reply as a template-ready assistant message (ValueError naming it as the reply)."""
    try:
        return normalize_messages([{**reply, "role": "assistant"}])[0]
    except ValueError as exc:
        raise ValueError(f"the reply: {str(exc).removeprefix('message 0: ')}") from None


def parse_line(row: Any, n: int) -> LogCall:
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    if "request" in row:
        request, response = row["request"], row.get("response") or {}
        if not isinstance(request, dict):
            raise ValueError("its 'request' is not a JSON object")
        messages, tools = request.get("messages") or [], request.get("tools")
        choices = response.get("choices") if isinstance(response, dict) else None
        if not choices and ("input" in request or isinstance(response, dict) and (
                response.get("object") == "response" or "output" in response)):
            raise ValueError("an OpenAI Responses API call (request.input, response.output), not a chat completion: "
                             "log the calls through chat.completions, or write each as {messages: [..., the reply]}")
        if not choices:
            raise ValueError("a request without a response (no choices)")
        if not isinstance(choices, list) or not isinstance(choices[0], dict) or \
                not isinstance(choices[0].get("message"), dict):
            raise ValueError("its response's choices[0].message is not a message object")
        reply = choices[0]["message"]
    else:
        messages, tools = row.get("messages") or [], row.get("tools")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ValueError("its messages are not a list of message objects ({role, content})")
        if not messages or messages[-1].get("role") != "assistant":
            raise ValueError("its messages do not end with the assistant's reply")
        messages, reply = messages[:-1], messages[-1]
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise ValueError("its messages are not a list of message objects ({role, content})")
    if not messages:
        raise ValueError("no messages before the reply")
    try:  # what a tokenizer and the store take: Unicode text
        json.dumps(row, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("it holds text that is not valid Unicode (a lone surrogate escape)") from None
    session = row.get("session_id") or row.get("episode")
    if session is not None and not isinstance(session, (str, int)):
        raise ValueError(f"its session_id {session!r} is not a string")
    # a line without a session is an episode of its own, named by its content: another log's line 1 is another
    # episode, and the same line imported again is the same one
    episode = session or "line-" + hashlib.sha1(json.dumps(row, sort_keys=True).encode("utf-8")).hexdigest()[:16]
    reward = row.get("reward")
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))
                               or not math.isfinite(reward)):  # NaN, Infinity, 1e400: no reward to train on
        raise ValueError(f"reward {reward!r} is not a finite number")
    return LogCall(str(episode), f"line {n}", normalize_messages(messages), normalize_tools(tools),
                   reply_message(reply), reward)


def as_record(call: LogCall, tokenizer: Any, stops: set[int]) -> tuple[CallRecord, bool]:
    """The call rendered: its prompt with the generation prompt, its reply as the template writes it after that,
    cut after the first end-of-turn token; and whether the reply's text round-trips the tokenizer. ValueError when
    the conversation with the reply does not begin with the prompt (a template that renders history otherwise)."""
    prompt = tokenizer.apply_chat_template(call.messages, tools=call.tools, add_generation_prompt=True, tokenize=False)
    whole = tokenizer.apply_chat_template(call.messages + [call.reply], tools=call.tools, tokenize=False)
    if not whole.startswith(prompt):
        raise ValueError("the chat template renders the conversation with the reply otherwise than its prompt")
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    suffix = whole[len(prompt):]
    reply_ids = tokenizer(suffix, add_special_tokens=False)["input_ids"]
    end = next((i for i, t in enumerate(reply_ids) if t in stops), None)
    reply_ids = reply_ids[:end + 1] if end is not None else reply_ids
    said = tokenizer.decode(reply_ids, skip_special_tokens=False)
    text = tokenizer.decode(reply_ids[:-1] if end is not None else reply_ids, skip_special_tokens=False)
    record = CallRecord(target="default", messages=call.messages, tools=call.tools, prompt_text=prompt,
                        prompt_ids=list(prompt_ids), response_ids=list(reply_ids), logprobs=[],
                        finish_reason="stop" if end is not None else "length", response_text=text, usage={})
    return record, suffix.startswith(said)


def import_calls(calls: list[LogCall], skipped: list[str], store: TraceStore, tokenizer: Any, source: str,
                 entries: Optional[int] = None, max_model_len: Optional[int] = None) -> ImportReport:
    """`calls` grouped into episodes, rendered, checked, then stored an episode to a transaction (its calls and its
    reward together: a refused or failed import leaves no episode half-written, so a rerun of the fixed log adds
    it); an episode the store has already is skipped (a log imported again adds only what is new), so is one
    longer than `max_model_len`. `entries`: what the log held (default: calls and skipped). The report counts
    only what is committed; StoreFailed when the store cannot be written (the episodes before it are stored)."""
    from astuner.model.engines.hf import stop_token_ids_of

    report = ImportReport(lines=len(calls) + len(skipped) if entries is None else entries, skipped=list(skipped))
    stops = set(stop_token_ids_of(tokenizer))
    episodes: dict[str, list[LogCall]] = {}
    for call in calls:
        episodes.setdefault(call.episode, []).append(call)
    for episode, group in episodes.items():
        if store.knows(episode):
            report.skipped.append(f"{group[0].where}: episode {episode!r} is in the store already")
            continue
        try:
            built = [as_record(call, tokenizer, stops) for call in group]
        except ValueError as exc:
            report.skipped.append(f"{group[0].where}: episode {episode!r}: {exc}")
            continue
        over = [(call.where, len(r.prompt_ids) + len(r.response_ids)) for call, (r, _) in zip(group, built)
                if max_model_len and len(r.prompt_ids) + len(r.response_ids) > max_model_len]
        if over:
            report.skipped.append(f"{over[0][0]}: episode {episode!r}: {over[0][1]} tokens, over the model's context "
                                  f"of {max_model_len}")
            continue
        records = [record for record, _ in built]
        check = check_episode(tokenizer, episode, [_without_ids(r) for r in records])
        for i, (_, reply_round_trips) in enumerate(built):  # the replies' text must come back from their ids too
            if not reply_round_trips:
                check.passed = False
                check.causes.append("round_trip")
                check.first_failed_call = i if check.first_failed_call is None else check.first_failed_call
        reward = next((c.reward for c in reversed(group) if c.reward is not None), None)
        try:
            store.add_episode(episode, records, source, reward, {"from": "log"}).result()  # committed
        except StoreFailed as exc:
            raise StoreFailed(f"{exc}; {report.episodes} episodes were imported whole before it, a rerun adds the "
                              f"rest") from None
        report.checks.append(check)
        report.episodes += 1
        report.calls += len(records)
        report.rewards += reward is not None
    return report


def _without_ids(record: CallRecord) -> CallRecord:
    """The record as its log had it (no ids): checked by the round trip of its rendered text."""
    from dataclasses import replace

    return replace(record, prompt_ids=[], response_ids=[])
