"""`astuner serve`: a model (or a run's checkpoint) as an OpenAI-compatible endpoint for an agent in use, every call
recorded token for token into a trace store (astuner.records.trace_store), rewards given afterwards through
`POST /v1/feedback` (`send_feedback`). server.py (the gateway with one key and sessions), cli.py, feedback.py."""

from astuner.serve.feedback import FeedbackRefused, send_feedback, send_feedback_async

__all__ = ["send_feedback", "send_feedback_async", "FeedbackRefused"]
