"""The agent -> policy map's syntax and its checks (`astuner.rollout.agent_policy` against `astuner.policies`): exact
agent names and shell-style patterns (fnmatch's syntax); two entries that can match one name are refused unless both
are for one policy and one is an exact name. The map itself, as the rollout uses it: astuner.model.policies."""

from __future__ import annotations

import fnmatch
from functools import lru_cache
from typing import Any


def is_pattern(name: str) -> bool:
    return any(c in name for c in "*?[")


def _set_end(pattern: str, i: int) -> int:
    """Where the set opened by pattern[i] == '[' closes (fnmatch's rules), or -1 when the '[' is a plain one."""
    j = i + 1
    if pattern[j:j + 1] == "!":
        j += 1
    if pattern[j:j + 1] == "]":
        j += 1
    return pattern.find("]", j)


def _tokens(pattern: str) -> tuple[Any, ...]:
    """A pattern as '*' and single-character sets (frozenset of allowed characters, or ('not', set))."""
    out: list[Any] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            if not out or out[-1] != "*":
                out.append("*")
        elif c == "?":
            out.append(("not", frozenset()))
        elif c == "[" and _set_end(pattern, i) > 0:
            end = _set_end(pattern, i)
            body, negate = pattern[i + 1:end], False
            if body[:1] == "!":
                body, negate = body[1:], True
            chars: set[str] = set()
            k = 0
            while k < len(body):
                if k + 2 < len(body) and body[k + 1] == "-":
                    chars.update(chr(x) for x in range(ord(body[k]), ord(body[k + 2]) + 1))
                    k += 3
                else:
                    chars.add(body[k])
                    k += 1
            out.append(("not", frozenset(chars)) if negate else frozenset(chars))
            i = end
        else:
            out.append(frozenset(c))
        i += 1
    return tuple(out)


def _chars_meet(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return True  # two complements of finite sets always share a character
    if isinstance(a, tuple):
        a, b = b, a
    if isinstance(b, tuple):
        return bool(a - b[1])
    return bool(a & b)


def patterns_overlap(p: str, q: str) -> bool:
    """Whether some name matches both shell-style patterns (fnmatch's syntax, case-sensitive)."""
    a, b = _tokens(p), _tokens(q)

    @lru_cache(maxsize=None)
    def meet(i: int, j: int) -> bool:
        if i == len(a) and j == len(b):
            return True
        if i < len(a) and a[i] == "*":
            return meet(i + 1, j) or (j < len(b) and meet(i, j + 1))
        if j < len(b) and b[j] == "*":
            return meet(i, j + 1) or (i < len(a) and meet(i + 1, j))
        return i < len(a) and j < len(b) and _chars_meet(a[i], b[j]) and meet(i + 1, j + 1)

    return meet(0, 0)


def agent_policy_problems(policies: dict[str, Any], agent_policy: dict[str, str]) -> list[tuple[str, str]]:
    """(key, message) for each thing wrong with the map: an unknown policy, an agent two entries match, a
    trainable policy no entry names, several policies and no map."""
    out: list[tuple[str, str]] = []
    if not policies:
        if agent_policy:
            out.append(("astuner.rollout.agent_policy", "astuner.rollout.agent_policy is set but astuner.policies is "
                        "empty; name the policies under astuner.policies, or remove agent_policy"))
        return out
    for agent, policy in agent_policy.items():
        if policy not in policies:
            out.append((f"astuner.rollout.agent_policy.{agent}",
                        f"astuner.rollout.agent_policy.{agent}: unknown policy {policy!r}; astuner.policies names "
                        f"{', '.join(sorted(policies))}"))
    names = list(agent_policy)
    for k, first in enumerate(names):
        for second in names[k + 1:]:
            both_patterns = is_pattern(first) and is_pattern(second)
            hit = (patterns_overlap(first, second) if both_patterns else
                   fnmatch.fnmatchcase(second, first) if is_pattern(first) and not is_pattern(second) else
                   fnmatch.fnmatchcase(first, second) if is_pattern(second) and not is_pattern(first) else False)
            if hit and (both_patterns or agent_policy[first] != agent_policy[second]):
                example = second if not is_pattern(second) else first if not is_pattern(first) else None
                said = f" (agent {example!r})" if example else ""
                blamed = second if is_pattern(second) else first  # the pattern that reaches too far
                out.append((f"astuner.rollout.agent_policy.{blamed}",
                            f"astuner.rollout.agent_policy.{blamed}: {first!r} and {second!r} both match one "
                            f"agent{said}; "
                            f"make the patterns disjoint"))
    if len(policies) > 1 and not agent_policy:
        out.append(("astuner.rollout.agent_policy", f"astuner.policies names {len(policies)} policies "
                    f"({', '.join(policies)}) but astuner.rollout.agent_policy is empty; map each agent (or pattern) to "
                    f"its policy"))
    elif agent_policy:
        used = set(agent_policy.values())
        for name, policy in policies.items():
            if policy.trainable and name not in used:
                out.append((f"astuner.policies.{name}", f"astuner.policies.{name} is trainable but no "
                            f"astuner.rollout.agent_policy entry uses it; map an agent to it or set trainable: false"))
    return out
