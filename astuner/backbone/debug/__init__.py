"""The debug backbone's trainer: policy updates, checkpoints, the step loop."""
