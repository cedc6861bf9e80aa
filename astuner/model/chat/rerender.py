"""The re-render check: does an episode's conversation, rendered again through the chat template and tokenized, give
the tokens the model actually saw? Training from recorded or imported traces that re-renders messages (SFT on a
chat log, a trainer's own template pass) silently trains on other tokens where it does not — the token drift
agentic RL users meet most. A call passes when its messages and tools, rendered with the generation prompt, tokenize
to its recorded prompt ids, and its reply, rebuilt as such a trainer rebuilds it (the assistant message the gateway
returned: text, tool calls, thinking; rendered by the template after that prompt and tokenized), gives the ids the
model generated, up to and with its end of turn; a call of a log without ids passes when the text round-trips the
tokenizer.

A mismatch is named by what undoes it (`continuation.py`'s normalisations, applied to the recorded text and to the
re-rendered one): `think` (the template drops an earlier reply's `<think>` block), `tool_json` (a tool call's JSON
re-serialised: key order, spacing), `whitespace`, several of them (`think+tool_json`), `tokenization` (the same
text, tokenized otherwise: a merge across a boundary), `round_trip` (text the tokenizer cannot give back), or
`other`; a reply's cause is prefixed `reply_` (`reply_tokenization`: the model generated its text in other tokens than
the tokenizer's, `reply_whitespace`, `reply_tool_json`, ...; `reply_history`: the template renders the conversation
with the reply otherwise than the prompt it was generated after)."""

from __future__ import annotations

from collections import Counter
from itertools import combinations
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from astuner.model.chat.continuation import SPACES, THINK, canonical_tool_calls
from astuner.model.chat.messages import normalize_messages
from astuner.model.chat.replies import reply_message
from astuner.schema.calls import CallRecord


NORMALISATIONS = (("think", lambda t: THINK.sub("", t)), ("tool_json", canonical_tool_calls),
                  ("whitespace", lambda t: SPACES.sub("", t)))


def cause_of(recorded: str, rendered: str) -> str:
    """What undoes the difference between two texts: the fewest normalisations, in order, joined by '+'."""
    if recorded == rendered:
        return "tokenization"
    for size in (1, 2, 3):
        for chosen in combinations(NORMALISATIONS, size):
            a, b = recorded, rendered
            for _, apply in chosen:
                a, b = apply(a), apply(b)
            if a == b:
                return "+".join(name for name, _ in chosen)
    return "other"


@dataclass
class EpisodeCheck:
    episode: str
    passed: bool
    causes: list[str] = field(default_factory=list)  # one per call that failed
    first_failed_call: Optional[int] = None


def render(tokenizer: Any, record: CallRecord, chat_template_kwargs: Optional[dict[str, Any]] = None) -> str:
    return tokenizer.apply_chat_template(record.messages, tools=record.tools, add_generation_prompt=True,
                                         tokenize=False, **(chat_template_kwargs or {}))


def check_call(tokenizer: Any, record: CallRecord, chat_template_kwargs: Optional[dict[str, Any]] = None
               ) -> Optional[str]:
    """None when the call re-renders to its tokens (or, without recorded ids, round-trips); else the cause."""
    text = render(tokenizer, record, chat_template_kwargs)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not record.prompt_ids:  # a log without ids: the text must come back from the tokens
        return None if tokenizer.decode(ids, skip_special_tokens=False) == text else "round_trip"
    if list(ids) == list(record.prompt_ids):
        return None
    return cause_of(tokenizer.decode(record.prompt_ids, skip_special_tokens=False), text)


def check_reply(tokenizer: Any, record: CallRecord, chat_template_kwargs: Optional[dict[str, Any]] = None
                ) -> Optional[str]:
    """None when the reply rebuilt from its message gives the generated ids (end of turn included); else the cause."""
    if not record.prompt_ids or not record.response_ids:
        return None
    kwargs = chat_template_kwargs or {}
    prompt = render(tokenizer, record, kwargs)
    messages = normalize_messages([*record.messages, reply_message(record)])
    whole = tokenizer.apply_chat_template(messages, tools=record.tools, tokenize=False, **kwargs)
    if not whole.startswith(prompt):
        return "reply_history"
    rebuilt = whole[len(prompt):]
    if tokenizer(rebuilt, add_special_tokens=False)["input_ids"][:len(record.response_ids)] == \
            list(record.response_ids):
        return None
    generated = tokenizer.decode(record.response_ids, skip_special_tokens=False)
    if rebuilt.startswith(generated):
        return "reply_tokenization"
    end = generated[len(record.response_text):] if record.finish_reason == "stop" else ""
    at = rebuilt.find(end) if end.strip() else -1  # the rebuilt reply up to and with its end of turn
    return "reply_" + cause_of(generated, rebuilt[:at + len(end)] if at >= 0 else rebuilt)


def check_episode(tokenizer: Any, episode: str, calls: Sequence[CallRecord],
                  chat_template_kwargs: Optional[dict[str, Any]] = None, replies: bool = True) -> EpisodeCheck:
    """Each call's prompt, and (`replies`) its reply; the first cause of each call that fails."""
    result = EpisodeCheck(episode, True)
    for i, record in enumerate(calls):
        cause = check_call(tokenizer, record, chat_template_kwargs) or (
            check_reply(tokenizer, record, chat_template_kwargs) if replies else None)
        if cause is not None:
            result.passed = False
            result.causes.append(cause)
            if result.first_failed_call is None:
                result.first_failed_call = i
    return result


def summary(checks: Sequence[EpisodeCheck]) -> dict[str, Any]:
    """Counts per cause (over the calls that failed) and the episodes that failed, by id."""
    causes = Counter(cause for check in checks for cause in check.causes)
    return {"episodes": len(checks), "passed": sum(c.passed for c in checks), "causes": dict(causes),
            "failed": [c.episode for c in checks if not c.passed]}
