"""The groups a failed episode left short, on verl (rollout.short_group drop), as the debug backbone's rollout
manager drops them.

verl's GRPO takes a group's mean and std over every row of its `uid`, and a failed episode is a row (our agent
loop sends a reward-0 stand-in with no trained token: verl takes exactly one output per row). Its siblings' advantages
would then describe a group with a zero that no episode earned. verl builds its agent-loop manager from
`actor_rollout_ref.rollout.agent.agent_loop_manager_class`: `ShortGroupsAgentLoopManager` is verl's own manager,
and after each training step's episodes it takes every trained token of such a group out of the loss (its
`response_mask` set to 0: no policy, KL or entropy term; the rows stay, since verl's mini-batches are of fixed size)
and marks its rows `group_dropped` (reward_extra_info, in the step's trajectories). The step's counts are in verl's
timing metrics: `timing_s/astuner/short_groups`, `timing_s/astuner/dropped_short_groups`. `short_group: train`,
which would leave the failed row out of the group's statistics, is refused on verl (its declaration).
"""

from __future__ import annotations

from typing import Any, Sequence

from verl.experimental.agent_loop.agent_loop import AgentLoopManager
from verl.utils.ray_utils import auto_await

from astuner.backbone.verl.translate import MODE_KEY


def short_groups(uids: Sequence[Any], failed: Sequence[float], train: Sequence[bool]) -> tuple[int, list[int]]:
    """(groups short of a failed episode, the rows of those with a survivor): over the training rows only."""
    groups: dict[Any, list[int]] = {}
    for row, (uid, is_train) in enumerate(zip(uids, train)):
        if is_train:
            groups.setdefault(uid, []).append(row)
    short = [rows for rows in groups.values() if any(failed[r] for r in rows)]
    return len(short), [r for rows in short if not all(failed[r] for r in rows) for r in rows]


class ShortGroupsAgentLoopManager(AgentLoopManager):
    @auto_await  # verl's trainer calls it without await, as it calls its own (which hands us the coroutine here)
    async def generate_sequences(self, prompts: Any) -> Any:
        output = await super().generate_sequences(prompts)
        extra = prompts.non_tensor_batch.get("extra_info")
        uids = prompts.non_tensor_batch.get("uid")
        if extra is None or uids is None or "failed" not in output.non_tensor_batch:
            return output
        train = [isinstance(e, dict) and e.get(MODE_KEY, "train") == "train" for e in extra]
        failed = [float(x) for x in output.non_tensor_batch["failed"]]
        short, dropped = short_groups(list(uids), failed, train)
        marks = output.non_tensor_batch["group_dropped"]
        for row in dropped:
            output.batch["response_mask"][row] = 0
            marks[row] = 1.0
        output.meta_info["timing"]["astuner/short_groups"] = float(short)
        output.meta_info["timing"]["astuner/dropped_short_groups"] = float(len(set(uids[r] for r in dropped)))
        return output
