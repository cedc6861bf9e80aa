"""Which earlier call a new prompt continues, so that its tokens are reused as the model produced them.

An agent framework hands the model its history as messages and the chat template renders them again: the
earlier reply comes back as the template writes it, not as the model wrote it — a blank line before
`<tool_call>` dropped, the call's JSON re-serialised, a `<think>` block left out. Compared as text, such a
prompt no longer continues the earlier call and the episode splits into samples that repeat the prompt.

Here a prompt continues an earlier call when it starts with that call's prompt and then holds, up to the
end-of-turn text the model generated, the same reply up to such re-rendering (`same_reply`). The prompt is
then built from the earlier call's exact ids, its reply's exact ids, and only the new text tokenized after
them: the model sees its own tokens (as verl's token-in, token-out agent loops do) and the episode stays
one sample whose trained tokens are exactly the engine's.
"""

from __future__ import annotations

import json
import re
from typing import Optional, Sequence

from astuner.schema.calls import CallRecord

THINK = re.compile(r"<think>.*?</think>", re.S)
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
AROUND_TAGS = re.compile(r"\s*(</?[A-Za-z_][\w-]*>)\s*")
SPACES = re.compile(r"\s+")


def canonical_tool_calls(text: str) -> str:
    """`text` with each `<tool_call>` JSON re-serialised one way: sorted keys, no spaces."""
    def call_json(match: re.Match) -> str:
        try:
            body = json.dumps(json.loads(match.group(1)), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        except ValueError:
            body = match.group(1).strip()
        return f"<tool_call>{body}</tool_call>"

    return TOOL_CALL.sub(call_json, text)


def canonical_reply(text: str) -> str:
    """A reply as the chat template may re-render it: no `<think>` block, tool-call JSON with sorted keys and
    no spaces, no whitespace around tags, runs of whitespace as one space."""
    text = canonical_tool_calls(THINK.sub("", text))
    return SPACES.sub(" ", AROUND_TAGS.sub(r"\1", text)).strip()


def same_reply(rendered: str, generated: str) -> bool:
    return canonical_reply(rendered) == canonical_reply(generated)


def continued_call(prompt_text: str, calls: Sequence[CallRecord]) -> Optional[tuple[CallRecord, int]]:
    """The earlier call `prompt_text` continues and how many of its characters that call accounts for (its
    prompt, and its reply verbatim or re-rendered); the longest such, or None."""
    best: Optional[tuple[CallRecord, int]] = None
    for call in calls:
        if not prompt_text.startswith(call.prompt_text) or (call.response_ids and not call.decoded_response):
            continue  # (a reply whose decoded text is unknown continues nothing: its ids would be reused blindly)
        done = call.prompt_text + call.decoded_response
        if prompt_text.startswith(done):
            used = len(done)
        else:
            end = call.decoded_response[len(call.response_text):]  # the end-of-turn token's text, if it stopped
            rest = prompt_text[len(call.prompt_text):]
            at = rest.find(end) if call.finish_reason == "stop" and end.strip() else -1
            if at < 0 or not same_reply(rest[:at], call.response_text):
                continue
            used = len(call.prompt_text) + at + len(end)
        if best is None or used > best[1]:
            best = (call, used)
    return best
