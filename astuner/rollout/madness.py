"""Madness checks: episodes where the model went off the rails get `rollout.agent_madness_reward`.

- `nonsense`: a reply leaks special tokens (e.g. `<|im_start|>` inside the text; the final end-of-turn
  token is normal) or degenerates into repetition (one token repeated, or a short phrase looping).
- `wrong_toolcall`: a reply holds a tool call that does not parse, lacks a name, has non-object
  arguments, or names a tool that was not offered.
Text in any language (Chinese, emoji, ...) is normal and never counts as nonsense.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable, Sequence

from astuner.schema.calls import CallRecord

PHRASE_CHARS = (4, 60)  # a looping phrase: this many characters,
PHRASE_COPIES = 10  # at least this many times in a row
MAX_SAME_TOKEN_RUN = 48


@lru_cache(maxsize=None)
def _looping(longest: int) -> re.Pattern:
    return re.compile(rf"(.{{{PHRASE_CHARS[0]},{longest}}}?)\1{{{PHRASE_COPIES - 1},}}", re.DOTALL)


def has_looping_phrase(text: str) -> bool:
    """A phrase of 4-60 characters 10 or more times in a row. Only phrases whose copies fit in the text are
    tried: for a short reply a few lengths instead of 57 at every position, with the same answer."""
    longest = min(PHRASE_CHARS[1], len(text) // PHRASE_COPIES)
    return longest >= PHRASE_CHARS[0] and _looping(longest).search(text) is not None


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
    if has_looping_phrase(call.response_text):
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
