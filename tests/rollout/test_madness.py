"""Madness checks."""

from __future__ import annotations

import random
import re

import pytest

from astuner.rollout.madness import has_looping_phrase, madness_reasons
from astuner.schema.calls import CallRecord

SPECIAL = {0, 1, 2}
END = 2


def call(ids, text, errors=(), finish="stop"):
    return CallRecord(target="a", messages=[], tools=None, prompt_text="", prompt_ids=[5], response_ids=list(ids),
                      logprobs=[0.0] * len(ids), finish_reason=finish, response_text=text,
                      tool_call_errors=list(errors))


@pytest.mark.parametrize("ids,text,expected", [
    ([10, 11, END], "fine answer", None),
    ([10, 1, 11, END], "leak <|im_start|>", "special token"),
    ([7] * 60 + [END], "x" * 60, "repeated"),
    ([10, END], "the same phrase " * 12, "looping"),
    ([10, 11, END], "答案是七 🎉 très bien", None),
    ([10, 11, 12, 2], "ends with the end token", None),
])
def test_nonsense(ids, text, expected):
    reasons = madness_reasons([call(ids, text)], ["nonsense"], SPECIAL)
    if expected is None:
        assert reasons == []
    else:
        assert len(reasons) == 1 and expected in reasons[0]


def test_wrong_toolcall_only_when_checked():
    calls = [call([10, END], "x", errors=["tool call JSON does not parse"])]
    assert madness_reasons(calls, ["nonsense"], SPECIAL) == []
    assert "wrong_toolcall in call 0" in madness_reasons(calls, ["wrong_toolcall"], SPECIAL)[0]


def test_looping_phrase_check_answers_as_the_plain_pattern():
    """Trying only the phrase lengths whose ten copies fit in the text changes no answer."""
    plain = re.compile(r"(.{4,60}?)\1{9,}", re.DOTALL)
    rng = random.Random(0)
    found = 0
    for _ in range(5000):
        alphabet = rng.choice(["ab", "abc", "ab \n", "xyz!"])
        noise = lambda: "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))  # noqa: E731
        phrase = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        text = noise() + phrase * rng.randint(0, 14) + noise()
        assert has_looping_phrase(text) == bool(plain.search(text)), text
        found += has_looping_phrase(text)
    assert 500 < found < 4500
