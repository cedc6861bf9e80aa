"""A frozen lake small enough for a CPU: a size × size grid made from the row's seed (a hole with probability
1 - p on each cell but the start and the goal); the agent says a direction each turn."""

from __future__ import annotations

import random

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


class FrozenLake:
    def __init__(self, size: int, p: float, seed: int):
        rng = random.Random(seed)
        self.size = size
        self.holes = {(r, c) for r in range(size) for c in range(size)
                      if (r, c) not in ((0, 0), (size - 1, size - 1)) and rng.random() > p}
        self.pos = (0, 0)

    def render(self) -> str:
        rows = []
        for r in range(self.size):
            rows.append("".join("P" if (r, c) == self.pos else "G" if (r, c) == (self.size - 1, self.size - 1)
                                else "H" if (r, c) in self.holes else "F" for c in range(self.size)))
        return "\n".join(rows)

    def step(self, text: str) -> tuple[bool, float]:
        """(done, reward) after the first direction named in `text` (none named: a step right)."""
        words = [w for w in text.lower().split() if w.strip(".,!") in MOVES]
        dr, dc = MOVES[words[0].strip(".,!")] if words else MOVES["right"]
        r = min(max(self.pos[0] + dr, 0), self.size - 1)
        c = min(max(self.pos[1] + dc, 0), self.size - 1)
        self.pos = (r, c)
        if self.pos in self.holes:
            return True, 0.0
        if self.pos == (self.size - 1, self.size - 1):
            return True, 1.0
        return False, 0.0
