"""Evaluating and comparing models: `astuner eval` (cli.py) and `select_model()` (astuner.tuner.model_selection)
on the same code: candidates.py (what --model names), runner.py (a model's episodes through the training's
rollout code), stats.py (pass@k, bootstrap intervals over tasks), report.py (figures, pairs, table, eval.json,
trajectories), evaluation.py (the whole sequence)."""
