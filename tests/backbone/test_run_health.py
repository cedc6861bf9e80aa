"""A distributed run's failed-episode limit and row problems (`backbone/run_health.py`), counted as the debug
backbone counts them: per step, against the step's episodes; per task, the rows none of whose episodes got past
them. The Ray side (the named actor, stopping Trinity's explorer or verl's task runner, the driver's end-of-run
line) runs in the backbones' end-to-end tests (test_trinity_e2e.py, test_verl_e2e.py)."""

from __future__ import annotations

from astuner.backbone.run_health import FAILURE_FILE, NO_STEP, RunHealth, failure
from astuner.rollout.row_problems import LIMIT
from astuner.schema.task import MissingField


def counter(tmp_path, stopped, backbone="Trinity", first_step=0, rate=0.5):
    health = RunHealth(backbone, {"train": 8, "val": 20}, rate, ["explorer", "trainer"], "ns",
                       str(tmp_path / FAILURE_FILE), first_step)
    health._stop = lambda: stopped.append(True)  # Ray's part, tested end to end
    return health


def lacks(task_id, field="env_url"):
    return MissingField(f"task {task_id!r} has no field {field!r}: its row has answer, question", task_id, field)


def test_a_step_stops_the_run_once_more_than_max_error_rate_of_its_episodes_failed(tmp_path):
    stopped = []
    health = counter(tmp_path, stopped)
    for i in range(4):
        health.record("train", "1", True, "Traceback ...\nRuntimeError: unreachable")
        health.record("train", "1", False, None)
    health.record("train", "2", True, "Traceback ...\nValueError: bad row")  # another step counts on its own
    assert not stopped and failure(tmp_path) is None  # 4 of 8: not more than half
    for _ in range(4):
        health.record("train", "2", True, "KeyError: 'x'")
    assert stopped == [True]  # 5 of 8: the fifth failure stops the run, once
    assert health.reason == ("5 of 8 episodes of Trinity's train step 2 failed (62% > astuner.rollout.max_error_rate "
                             "0.5); first error: ValueError: bad row (tracebacks in the log)")
    assert failure(tmp_path) == health.reason  # for the driver, which ends the run with it
    health.record("train", "3", True, "x")
    assert stopped == [True]


def test_evaluation_steps_count_against_the_validation_episodes(tmp_path):
    stopped = []
    health = counter(tmp_path, stopped)
    for _ in range(10):
        health.record("val", "2/astuner_val", True, "RuntimeError: judge down")
    assert not stopped  # 10 of 20
    health.record("val", "2/astuner_val", True, "RuntimeError: judge down")
    assert stopped and "11 of 20 episodes of Trinity's val step 2/astuner_val failed" in health.reason


def test_without_a_step_episodes_count_in_batches_of_the_step_in_order_after_the_resumed_step(tmp_path):
    """verl names no step to its agent loop: its steps run one after another, a step's episodes before the
    next's, so the next train_batch_size × num_repeat training episodes are the next step."""
    stopped = []
    health = counter(tmp_path, stopped, backbone="verl", first_step=4)
    for i in range(8):  # step 5: half failed, not more
        health.record("train", None, i % 2 == 0, "RuntimeError: flaky")
    for _ in range(20):  # a validation between the steps counts on its own
        health.record("val", None, False, None)
    assert not stopped
    for i in range(5):
        health.record("train", None, True, "Traceback ...\nRuntimeError: down")
    assert stopped == [True]
    assert health.reason.startswith("5 of 8 episodes of verl's train step 6 failed (62% > ")
    stopped = []
    health = counter(tmp_path, stopped, backbone="verl")
    for _ in range(11):
        health.record("val", None, True, "RuntimeError: judge down")
    assert stopped and health.reason.startswith("11 of 20 episodes of verl's validation 1 of this run failed")


def test_rows_every_episode_of_which_failed_are_named_in_one_line_and_fail_a_run_that_trained_nothing(tmp_path):
    stopped = []
    health = counter(tmp_path, stopped, rate=1.0)
    assert health.row_summary() == (None, True)
    for task in ("train-0", "train-3", "train-6", "train-9"):
        for _ in range(2):
            health.record("train", "1", True, str(lacks(task)), task, lacks(task))
    summary, none_trained = health.row_summary()
    assert none_trained and not stopped  # max_error_rate 1.0: the run goes on, and at its end fails with the line
    assert summary.startswith("4 tasks skipped: every episode failed on its row, 4 lacking field 'env_url' "
                              "('train-0', 'train-3', 'train-6' and 1 more)")
    assert len(NO_STEP + summary) <= LIMIT
    health.record("train", "1", False, None, "train-1", None)  # another task trained
    health.record("train", "1", True, str(lacks("train-2")), "train-2", lacks("train-2"))
    health.record("train", "1", False, None, "train-2", None)  # a task one of whose episodes got past its row
    summary, none_trained = health.row_summary()
    assert not none_trained and summary.startswith("4 tasks skipped")


def test_a_row_problem_stops_a_step_with_its_own_line_and_a_long_error_is_cut_to_one(tmp_path):
    stopped = []
    health = counter(tmp_path, stopped)
    for i in range(5):
        health.record("train", "1", True, str(lacks(f"train-{i}")), f"train-{i}", lacks(f"train-{i}"))
    assert stopped and health.reason.endswith("first error: task 'train-0' has no field 'env_url': its row has "
                                              "answer, question")  # the whole line: no traceback to look for
    stopped = []
    health = counter(tmp_path, stopped)
    for _ in range(5):
        health.record("train", "1", True, "Traceback ...\nValueError: " + "x" * 5000)
    assert stopped and len(health.reason) <= LIMIT and health.reason.endswith("... (tracebacks in the log)")


def test_the_driver_reads_the_row_line_from_the_run_folder_at_the_end(tmp_path):
    """Trinity shuts its Ray connection (and the actor) down as it ends: the line is kept in the run folder."""
    import pytest

    from astuner.backbone.run_health import ROWS_FILE, finish
    from astuner.errors import DataError
    from tests.helpers import captured_logs

    finish(tmp_path)  # no row problem: nothing said
    health = counter(tmp_path, [], rate=1.0)
    health.record("train", "1", True, str(lacks("train-0")), "train-0", lacks("train-0"))
    assert (tmp_path / ROWS_FILE).exists() and not list(tmp_path.glob("*.partial"))
    kept = (tmp_path / ROWS_FILE).read_text()
    (tmp_path / ROWS_FILE).unlink()
    health.record("train", "1", True, str(lacks("train-0")), "train-0", lacks("train-0"))
    assert not (tmp_path / ROWS_FILE).exists()  # the same line: not written again per episode
    (tmp_path / ROWS_FILE).write_text(kept)
    with pytest.raises(DataError, match=r"^no step trained: 1 task skipped: every episode failed on its row, 1 "
                                        r"lacking field 'env_url' \('train-0'\)"):
        finish(tmp_path)
    health.record("train", "1", False, None, "train-1", None)
    from loguru import logger

    logs, sink = captured_logs("WARNING")
    try:
        finish(tmp_path)
    finally:
        logger.remove(sink)
    assert [line for line in logs if line.startswith("1 task skipped")]
