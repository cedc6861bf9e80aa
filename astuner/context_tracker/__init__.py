"""From recorded model calls to training samples, and the madness checks on episodes."""

from astuner.context_tracker.tracker import build_samples

__all__ = ["build_samples"]
