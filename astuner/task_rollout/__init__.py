"""Names the seed system's files import from `astuner.task_rollout` (its rollout package), kept for them."""
