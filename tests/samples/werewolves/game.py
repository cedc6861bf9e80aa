"""A seven-player werewolves game small enough for a CPU: 2 werewolves, 3 villagers, a seer and a witch talk in
turns for three rounds; the side whose statements carry more of its own votes wins. Every statement is one
agent reply (one or more model calls)."""

from __future__ import annotations

import re

from agentscope.message import Msg

ROUNDS = 3


class BadGuyException(Exception):
    """A werewolf broke the rules (kept for the sample's error branch)."""


def _vote(text: str, players: list[str]) -> str:
    """The player a statement names (Player1..Player7), else one chosen from the text's length."""
    named = re.findall(r"Player\s*([1-7])", text)
    return f"Player{named[0]}" if named else players[len(text) % len(players)]


async def werewolves_game(agents: list, roles: list[str]) -> bool:
    """Play the game; True when the good guys win."""
    names = [a.name for a in agents]
    votes: dict[str, int] = {n: 0 for n in names}
    history = "Moderator: the game begins. Each player says who is suspicious."
    for turn in range(ROUNDS):
        for agent, role in zip(agents, roles):
            reply = await agent.reply(Msg("Moderator", f"{history}\nRound {turn + 1}, {agent.name}: speak.", "user"))
            text = reply.get_text_content() or ""
            votes[_vote(text, names)] += 1
            history += f"\n{agent.name}: {text[:80]}"
    wolves = sum(votes[n] for n, r in zip(names, roles) if r == "werewolf")
    return wolves >= 4  # the werewolves drew many votes: the village found them
