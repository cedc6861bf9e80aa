"""Rollouts: inference engines and the manager that runs episodes in groups."""
