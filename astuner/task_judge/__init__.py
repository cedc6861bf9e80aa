"""Judges turn a finished episode into a reward."""

from astuner.task_judge.base import BaseJudge, check_judge_plugin

__all__ = ["BaseJudge", "check_judge_plugin"]
