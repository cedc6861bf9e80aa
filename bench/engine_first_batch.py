"""The hf engine's first batch against its later ones, before and after idle OpenMP threads were made to sleep.

`--prompts` prompts x `--tokens` new tokens (temperature 1, no stop before the limit is forced) with the tiny model
(hidden size 64, 2 layers, made in a temporary folder), decoded by `HFEngine` in its worker thread, `--batches`
batches in a row, each measurement in a fresh process (the OpenMP runtime reads its settings when torch loads):

    before   OpenMP's default wait policy (idle threads spin; no OMP_WAIT_POLICY, GOMP_SPINCOUNT, KMP_BLOCKTIME)
    after    astuner.model.openmp.prefer_passive_waits() before torch is imported, as the astuner command,
             tune() and astuner chat do
    before+main   as before, with one forward pass on the main thread first (a second OpenMP team: what a run's
             first update did; --variants before,after,before+main to see it)

The variants alternate `--repeats` times. With `--busy N`, N busy-loop processes run meanwhile (each stops by
itself after `--busy-limit-s`, and all are stopped at the end). Printed: every process's batch times, then per
variant the first batch, the later ones (median), the process's CPU seconds per second of a batch (spinning
threads burn CPU while they wait) and the load average.

    python bench/engine_first_batch.py [--busy 0] [--repeats 2] [--batches 3] [--prompts 64] [--tokens 48]
                                       [--variants before,after] [--child-timeout-s 900]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
POLICY_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
VARIANTS = ("before", "after", "before+main")


def child(variant: str, model_dir: str, prompts: int, tokens: int, batches: int) -> dict:
    """One measurement, in this fresh process."""
    if variant == "after":
        from astuner.model.openmp import prefer_passive_waits

        assert prefer_passive_waits() == "set"
    import asyncio
    import resource

    import torch
    from transformers import AutoTokenizer

    from astuner.model.engines.base import SamplingParams
    from astuner.model.engines.hf import HFEngine

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    engine = HFEngine.from_pretrained(model_dir, tokenizer, max_num_seqs=prompts, device="cpu")
    engine.stop_token_ids = set()  # every row decodes `tokens` tokens: the same work in every batch
    if variant == "before+main":
        with torch.no_grad():
            engine.model(input_ids=torch.tensor([[1, 2, 3]]))
    ids = [tokenizer.encode(f"What is {i} plus {3 * i}? Reply with one number.") for i in range(prompts)]
    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=tokens)

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    async def run() -> list[tuple[float, float]]:
        out = []
        for _ in range(batches):
            wall, used = time.perf_counter(), cpu()
            results = await asyncio.gather(*[engine.generate(p, sampling) for p in ids])
            assert all(len(r.token_ids) == tokens for r in results)
            out.append((time.perf_counter() - wall, cpu() - used))
        return out

    times = asyncio.run(run())
    engine_threads = engine._executor.submit(torch.get_num_threads).result()
    return {"variant": variant, "wall": [w for w, _ in times], "cpu": [c for _, c in times],
            "threads_main": torch.get_num_threads(), "threads_engine": engine_threads,
            "wait_policy": os.environ.get("OMP_WAIT_POLICY", "(default)"), "torch": torch.__version__}


def busy_loops(n: int, limit_s: float) -> list[subprocess.Popen]:
    code = f"import time\nend = time.time() + {limit_s}\nwhile time.time() < end:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=0, help="busy-loop processes running meanwhile (default 0)")
    parser.add_argument("--busy-limit-s", type=float, default=1800.0, help="each busy loop stops by itself after")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--variants", default="before,after")
    parser.add_argument("--child-timeout-s", type=float, default=900.0)
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "MODEL_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child[0], args.child[1], args.prompts, args.tokens, args.batches)))
        return
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or args.batches < 2:
        parser.error(f"--variants takes {', '.join(VARIANTS)} (got {', '.join(unknown)}); --batches at least 2")

    from astuner.model.tiny_model import build_tiny_model
    from astuner.records.progress import quiet_libraries

    quiet_libraries()

    env = {k: v for k, v in os.environ.items() if k not in POLICY_VARIABLES}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    rows: dict[str, list[dict]] = {v: [] for v in variants}
    print(f"{args.prompts} prompts x {args.tokens} tokens, {args.batches} batches per process, {args.busy} busy "
          f"loops, CPUs available {len(os.sched_getaffinity(0))}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(build_tiny_model(Path(tmp) / "tiny", seed=0))
        loops = busy_loops(args.busy, args.busy_limit_s)
        try:
            time.sleep(3 if loops else 0)
            for repeat in range(args.repeats):
                for variant in variants:
                    load = os.getloadavg()[0]
                    command = [sys.executable, __file__, "--child", variant, model_dir, "--prompts", str(args.prompts),
                               "--tokens", str(args.tokens), "--batches", str(args.batches)]
                    try:
                        proc = subprocess.run(command, env=env, capture_output=True, text=True,
                                              timeout=args.child_timeout_s)
                    except subprocess.TimeoutExpired:
                        print(f"  {variant:12s} timed out after {args.child_timeout_s:.0f} s (load {load:.1f})")
                        continue
                    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
                    if proc.returncode or not lines:
                        sys.exit(f"{variant}: the measuring process failed: {proc.stderr.strip()[-400:]}")
                    row = json.loads(lines[-1][len("RESULT "):])
                    row["load"] = (load + os.getloadavg()[0]) / 2
                    rows[variant].append(row)
                    print(f"  {variant:12s} batches " + " ".join(f"{w:6.2f}" for w in row["wall"]) + " s | CPU s per s "
                          + " ".join(f"{c / w:4.2f}" for w, c in zip(row["wall"], row["cpu"]))
                          + f" | torch threads main {row['threads_main']} engine {row['threads_engine']}"
                          + f" | OMP_WAIT_POLICY {row['wait_policy']} | load {row['load']:.1f}", flush=True)
        finally:
            for loop in loops:
                loop.terminate()
            for loop in loops:
                loop.wait()
    print(f"\n| variant | first batch | later batches (median) | first / later | CPU s per s | load |")
    print("| --- | --- | --- | --- | --- | --- |")
    for variant, done in rows.items():
        if not done:
            continue
        first = statistics.median(r["wall"][0] for r in done)
        later = statistics.median(w for r in done for w in r["wall"][1:])
        ratio = statistics.median(sum(r["cpu"]) / sum(r["wall"]) for r in done)
        load = statistics.mean(r["load"] for r in done)
        print(f"| {variant} | {first:.2f} s | {later:.2f} s | {first / later:.1f} | {ratio:.2f} | {load:.1f} |")


if __name__ == "__main__":
    main()
