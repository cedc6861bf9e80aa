"""A Trinity run's failed-episode limit (`backbone/trinity/health.py`), counted as the debug backbone counts
it: per step, against the step's episodes. The Ray side (the named actor, stopping Trinity's explorer) runs
in tests/backbone/trinity_backbone/test_trinity_e2e.py."""

from __future__ import annotations

from astuner.backbone.trinity.health import RunHealth, failure


def counter(tmp_path, stopped):
    health = RunHealth({"train": 8, "val": 20}, 0.5, ["explorer", "trainer"], "ns", str(tmp_path / "failure.txt"))
    health._stop_trinity = lambda: stopped.append(True)  # Ray's part, tested end to end
    return health


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
    assert (tmp_path / "failure.txt").read_text() == health.reason
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


def test_an_error_trinity_caught_and_logged_fails_the_run(tmp_path):
    from astuner.backbone.trinity.health import caught_error

    assert caught_error(tmp_path) is None
    # as Trinity's trainer logged a step that failed on the CPU before the CPU mode's hooks existed
    (tmp_path / "trainer.log").write_text(
        "INFO 11-22 14:23:40 [trainer.py:120] Trainer started.\n"
        "ERROR 11-22 14:23:49 [trainer.py:156] Error in Trainer:\n"
        "ERROR 11-22 14:23:49 [trainer.py:156] Traceback (most recent call last):\n"
        "ERROR 11-22 14:23:49 [trainer.py:156]   File \"/x/verl/utils/attention_utils.py\", line 30, in f\n"
        "ERROR 11-22 14:23:49 [trainer.py:156]     from flash_attn.bert_padding import unpad_input\n"
        "ERROR 11-22 14:23:49 [trainer.py:156] ModuleNotFoundError: No module named 'flash_attn'\n"
        "INFO 11-22 14:23:50 [trainer.py:170] Trainer finished.\n")
    (tmp_path / "explorer.log").write_text("INFO 11-22 14:23:50 [explorer.py:310] Explorer finished.\n")
    assert caught_error(tmp_path) == ("Trinity's trainer stopped on an error: ModuleNotFoundError: No module "
                                      "named 'flash_attn'")
