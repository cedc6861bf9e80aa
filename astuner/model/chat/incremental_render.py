"""Render only what is new since the episode's previous call.

An agent's next prompt is the previous one plus the model's reply and the tool results: the previous messages,
unchanged, then an assistant message, then tool messages. A chat template renders each message from its own
content and its neighbours' roles, so that prompt is the previous prompt without its generation prompt, then
the text the template writes for the new messages. That text is rendered from a short window: a fixed user
message, the reply, the tool results; less what the window's first message alone renders (cached per tool
list). The whole history is not rendered again at each call: per call the cost no longer grows with the episode.

Whether a template renders this way is checked, not assumed: the first `VERIFY` windows of each kind (which
roles are new, whether the reply calls tools) per template are also rendered whole and compared; one difference
and that template is rendered whole from then on. A window that does not fit (a changed history, other tools, a
user turn that a template may use to re-render earlier turns) is rendered whole too.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from loguru import logger

from astuner.schema.calls import CallRecord

VERIFY = 4  # windows of each kind rendered both ways before the window alone is trusted
ANCHOR = {"role": "user", "content": "Hi."}  # the window's first message: stands in for the earlier history
MAX_HEADS = 16


@dataclass
class _Head:
    tools: Optional[list[dict[str, Any]]]
    kwargs: dict[str, Any]
    anchor: str  # the anchor message alone, rendered
    generation: str  # what the generation prompt adds to it


@dataclass
class TemplateState:
    """Per tokenizer: cached window heads, verified kinds, and whether windows are off for its template."""

    template: Any = None
    heads: list[_Head] = field(default_factory=list)
    verified: dict[tuple, int] = field(default_factory=dict)
    off: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


_STATES: "weakref.WeakKeyDictionary[Any, TemplateState]" = weakref.WeakKeyDictionary()
_STATES_LOCK = threading.Lock()

Render = Callable[[list[dict[str, Any]], Optional[list[dict[str, Any]]], bool], str]


def _state(tokenizer: Any) -> TemplateState:
    template = getattr(tokenizer, "chat_template", None)
    with _STATES_LOCK:
        state = _STATES.get(tokenizer)
        if state is None or state.template != template:  # a new template is checked anew
            state = _STATES[tokenizer] = TemplateState(template)
        return state


def _previous(calls: Sequence[CallRecord], target: str, msgs: list[dict],
              tools: Optional[list]) -> Optional[CallRecord]:
    """The target's last call when `msgs` are its messages, its reply and then only tool results."""
    prev = next((c for c in reversed(calls) if c.target == target), None)
    if prev is None or prev.finish_reason != "stop" or prev.tools != tools:
        return None
    n = len(prev.messages)
    if len(msgs) < n + 2 or msgs[n]["role"] != "assistant" or any(m["role"] != "tool" for m in msgs[n + 1:]):
        return None
    return prev if msgs[:n] == prev.messages else None


def _head(state: TemplateState, render: Render, tools: Optional[list], kwargs: dict) -> _Head:
    for head in state.heads:
        if head.tools == tools and head.kwargs == kwargs:
            return head
    anchor = render([ANCHOR], tools, False)
    prompted = render([ANCHOR], tools, True)
    if not prompted.startswith(anchor):
        raise ValueError("the generation prompt is not appended to the rendered messages")
    head = _Head(tools, dict(kwargs), anchor, prompted[len(anchor):])
    with state.lock:
        state.heads = [head] + state.heads[: MAX_HEADS - 1]
    return head


def render_prompt(tokenizer: Any, render: Render, msgs: list[dict[str, Any]], tools: Optional[list[dict[str, Any]]],
                  kwargs: dict[str, Any], calls: Sequence[CallRecord], target: str) -> str:
    """`render(msgs, tools, True)` (the whole prompt, generation prompt added), from a window where it can be."""
    state = _state(tokenizer)
    prev = None if state.off else _previous(calls, target, msgs, tools)
    if prev is None:
        return render(msgs, tools, True)
    new = msgs[len(prev.messages):]
    try:
        head = _head(state, render, tools, kwargs)
        window = render([ANCHOR, *new], tools, True)
    except Exception as exc:  # noqa: BLE001 - a template that refuses the window (say, roles must alternate)
        return _off(state, render, msgs, tools, f"it does not render a window ({type(exc).__name__}: {exc})")
    if not window.startswith(head.anchor) or not prev.prompt_text.endswith(head.generation):
        return _off(state, render, msgs, tools, "what it renders for a message depends on the messages after it")
    text = prev.prompt_text[: len(prev.prompt_text) - len(head.generation)] + window[len(head.anchor):]
    kind = (tuple(m["role"] for m in new), bool(new[0].get("tool_calls")), bool(new[0]["content"]),
            repr(sorted(kwargs.items())))
    if state.verified.get(kind, 0) < VERIFY:
        whole = render(msgs, tools, True)
        if whole != text:
            return _off(state, render, msgs, tools, "a window rendered differently from the whole conversation",
                        whole)
        with state.lock:
            state.verified[kind] = state.verified.get(kind, 0) + 1
    return text


def _off(state: TemplateState, render: Render, msgs: list, tools: Optional[list], why: str,
         whole: Optional[str] = None) -> str:
    with state.lock:
        if not state.off:
            logger.warning(f"the chat template is rendered whole at every call from now on: {why}")
        state.off = True
    return whole if whole is not None else render(msgs, tools, True)
