"""Add pass-rate feature columns to task rows, for difficulty-based task selection (BOTS).

Either run reference models over the rows (each task `--repeats` times through the experiment's own
workflow and judge) and record each model's pass rate:

    python tutorial/example_data_augment/prepare_data.py --conf tutorial/example_data_augment/config_difficulty.yaml \\
        --input tutorial/example_tiny_cpu/train.jsonl --output /tmp/train_features.jsonl \\
        --model pass_rate_weak=/path/to/weaker/model --model pass_rate_strong=/path/to/stronger/model

or copy columns you already have (`--from-column target=source`, e.g. rates measured elsewhere).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from pathlib import Path


def pass_rates(conf: str, model_path: str, rows_path: str, repeats: int) -> dict[str, float]:
    from astuner.config import load_run_config
    from astuner.plugins import resolve_plugins
    from astuner.model.engines.factory import load_tokenizer
    from astuner.model.engines.hf import HFEngine
    from astuner.rollout.manager import RolloutManager, build_judge
    from astuner.task_reader.dataset_file import read_jsonl_tasks

    run = load_run_config(conf, [f"astuner.model.path={model_path}", "astuner.model.tiny=null"])
    plugins = resolve_plugins(run)
    tokenizer = load_tokenizer(model_path)
    engine = HFEngine.from_pretrained(model_path, tokenizer, max_num_seqs=128, seed=run.astuner.rollout.seed)
    manager = RolloutManager(run.astuner, plugins.workflow, build_judge(plugins.judge, run.astuner), engine, tokenizer)
    tasks = read_jsonl_tasks(rows_path, "train", run.astuner.task_reader.query_field)
    batch = asyncio.run(manager.run(tasks, "train", num_repeat=repeats, tag="prepare_data"))
    return {task_id: statistics.fmean(e.is_success for e in group) for task_id, group in batch.groups().items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--conf", help="the experiment whose workflow and judge score the reference models")
    parser.add_argument("--model", action="append", default=[], metavar="COLUMN=MODEL_PATH")
    parser.add_argument("--from-column", action="append", default=[], metavar="COLUMN=SOURCE_COLUMN")
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    rows = [json.loads(line) for line in Path(args.input).read_text(encoding="utf-8").splitlines() if line.strip()]
    for spec in args.from_column:
        target, source = spec.split("=", 1)
        for row in rows:
            row[target] = float(row[source])
    for spec in args.model:
        if not args.conf:
            parser.error("--model needs --conf (the workflow and judge that score the model)")
        column, path = spec.split("=", 1)
        rates = pass_rates(args.conf, path, args.input, args.repeats)
        for i, row in enumerate(rows):
            row[column] = rates[str(row.get("task_id", row.get("id", f"train_{i}")))]
        print(f"{column}: mean pass rate {statistics.fmean(rates.values()):.3f} over {len(rates)} tasks")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
