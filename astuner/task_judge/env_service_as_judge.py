"""The seed system's path of `EnvServiceJudge` (its template's default `judge_protocol`,
`astuner.task_judge.env_service_as_judge->EnvServiceJudge`); the judge lives in `env_service_judge.py`."""

from astuner.task_judge.env_service_judge import EnvServiceJudge

__all__ = ["EnvServiceJudge"]
