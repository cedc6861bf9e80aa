"""Where a path the user names is looked for: the working folder, then the config's folder and its parents —
each place once, so an error's "tried ..." list never names one path twice."""

from __future__ import annotations

from pathlib import Path

from astuner.config.paths import candidate_paths, looks_like_hub_id, tried_paths


def test_each_place_is_tried_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    # the config's folder's parents include the working folder, given relative and absolute
    roots = [Path("conf"), Path("."), tmp_path, tmp_path / "conf"]
    found = candidate_paths("agent.py", roots)
    assert found == [tmp_path / "agent.py", tmp_path / "conf" / "agent.py"]
    shown = tried_paths("agent.py", roots).replace(f"{tmp_path}/", "")
    assert shown == "agent.py, conf/agent.py"  # was "agent.py, conf/agent.py, agent.py, ..."


def test_what_can_be_a_hub_id():
    for hub in ("gsm8k", "openai/gsm8k", "Qwen/Qwen2.5-0.5B-Instruct"):
        assert looks_like_hub_id(hub)
    for path in ("./data/x", "/opt/data/x", "a/b/c", "~/x", "../x", "data/../x"):
        assert not looks_like_hub_id(path)
