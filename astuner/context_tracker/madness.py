"""Madness checks: episodes where the model went off the rails get `rollout.agent_madness_reward`.

- `nonsense`: a reply leaks special tokens (e.g. `<|im_start|>` inside the text; the final end-of-turn
  token is normal) or degenerates into repetition (one token repeated, or a short phrase looping).
- `wrong_toolcall`: a reply holds a tool call that does not parse, lacks a name, has non-object
  arguments, or names a tool that was not offered.
Text in any language (Chinese, emoji, ...) is normal and never counts as nonsense.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

from astuner.tuner.recorder import CallRecord

_LOOPING_PHRASE = re.compile(r"(.{4,60}?)\1{9,}", re.DOTALL)
MAX_SAME_TOKEN_RUN = 48


def _longest_run(ids: Sequence[int]) -> int:
    best = run = 0
    previous = None
    for token in ids:
        run = run + 1 if token == previous else 1
        previous = token
        best = max(best, run)
    return best


def nonsense_reason(call: CallRecord, special_ids: set[int]) -> str | None:
    body = call.response_ids[:-1] if call.finish_reason == "stop" else call.response_ids
    leaked = [t for t in body if t in special_ids]
    if leaked:
        return f"special token id {leaked[0]} inside a reply"
    if _longest_run(body) >= MAX_SAME_TOKEN_RUN:
        return "one token repeated over and over"
    if _LOOPING_PHRASE.search(call.response_text):
        return "a phrase looping"
    return None


def madness_reasons(calls: Iterable[CallRecord], checklist: Sequence[str], special_ids: set[int]) -> list[str]:
    """Why the episode is mad ([] when it is not), for the checks in `checklist`."""
    reasons: list[str] = []
    for i, call in enumerate(calls):
        if "nonsense" in checklist:
            reason = nonsense_reason(call, special_ids)
            if reason:
                reasons.append(f"nonsense in call {i}: {reason}")
        if "wrong_toolcall" in checklist and call.tool_call_errors:
            reasons.append(f"wrong_toolcall in call {i}: {call.tool_call_errors[0]}")
    return reasons
