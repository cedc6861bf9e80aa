"""What Trinity caught and logged while it went on as if done (`backbone/trinity/health.py`). Its failed
episodes are counted by the run's health actor: tests/backbone/test_run_health.py."""

from __future__ import annotations


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
