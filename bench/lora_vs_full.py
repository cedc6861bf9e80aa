"""LoRA against full fine-tuning on the embedded demo (the tiny model learns by GRPO to name the digit after
the one in the question), side by side in one run: steps to the reward bar, validation at the end, wall time,
the run's peak memory, and what each trains and holds — measured on the demo's tiny model, and counted by
peft on a Qwen2.5-7B-shaped model built on the meta device (no weights allocated).

    python bench/lora_vs_full.py [--seeds 0 1 2] [--exp-dir /tmp/astuner_bench_lora]

The bar: the mean training reward over 10 consecutive steps reaches 0.8. The LoRA run's settings are
LORA_OVERRIDES (rank 16 on every linear layer and the output head, lr 1.5e-3; full fine-tuning keeps the
demo's lr 1e-3). Exits 1 when a LoRA run misses the bar.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_cpu_seeds import run  # noqa: E402

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]
LORA = {"rank": 16, "alpha": 16, "target_modules": TARGETS, "dropout": 0.0}
LORA_OVERRIDES = [f"astuner.model.lora={{rank: {LORA['rank']}, alpha: {LORA['alpha']}, "
                  f"target_modules: [{', '.join(TARGETS)}]}}", "astuner.trainer_common.optim.lr=1.5e-3"]
BAR, WINDOW = 0.8, 10


def steps_to_bar(rewards: list[float]) -> int | None:
    for end in range(WINDOW, len(rewards) + 1):
        if statistics.fmean(rewards[end - WINDOW:end]) >= BAR:
            return end
    return None


def training_state(model, lora) -> dict[str, float]:
    """Parameters, trainable parameters, and the bytes of fp32 weights + gradients + AdamW's two moments."""
    from astuner.backbone.debug.lora import add_adapter, trainable_counts

    if lora is not None:
        model = add_adapter(model, SimpleNamespace(**lora))
    trainable, total = trainable_counts(model)  # without an adapter every parameter trains
    return {"total": total, "trainable": trainable, "bytes": 4 * total + 4 * 3 * trainable}


def counted(path_or_config, lora) -> dict[str, float]:
    import torch
    from transformers import AutoModelForCausalLM

    if isinstance(path_or_config, (str, Path)):
        model = AutoModelForCausalLM.from_pretrained(str(path_or_config), dtype=torch.float32)
    else:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(path_or_config)
    return training_state(model, lora)


def qwen_7b_shape():
    from transformers import Qwen2Config

    # Qwen2.5-7B-Instruct's published shape
    return Qwen2Config(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--exp-dir", type=Path, default=Path("/tmp/astuner_bench_lora"))
    args = parser.parse_args()
    rows = []
    for seed in args.seeds:
        for kind, overrides in (("full", []), ("lora", LORA_OVERRIDES)):
            r = run(seed, args.exp_dir, "fp32", overrides, tag=f"_{kind}")
            rows.append({**r, "kind": kind, "bar_step": steps_to_bar(r["rewards"])})
    print(f"| seed | training | steps to bar (10-step mean reward >= {BAR}) | reward, last 10% | val reward end | "
          f"wall time | peak RSS |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        bar = r["bar_step"] if r["bar_step"] is not None else f"not in {r['steps']}"
        print(f"| {r['seed']} | {r['kind']} | {bar} | {r['last']:.3f} | {r['val_end']:.3f} | {r['seconds']:.0f} s | "
              f"{r['peak_rss_mb']:.0f} MB |")
    tiny = args.exp_dir / ".models" / f"tiny_cpu_seed{args.seeds[0]}"
    print("\n| model | training | trainable parameters | weights + gradients + AdamW state (fp32) |")
    print("| --- | --- | --- | --- |")
    for label, source in (("demo's tiny Qwen2", tiny), ("Qwen2.5-7B shape (meta device)", qwen_7b_shape())):
        for kind, lora in (("full", None), ("lora", LORA)):
            c = counted(source, lora)
            print(f"| {label} | {kind} | {c['trainable']:,} of {c['total']:,} ({100 * c['trainable'] / c['total']:.2f}%) "
                  f"| {c['bytes'] / 2**20:,.1f} MiB |")
    missed = [r for r in rows if r["kind"] == "lora" and r["bar_step"] is None]
    print(f"LoRA bar: {'met by every seed' if not missed else 'MISSED by seed ' + str([r['seed'] for r in missed])}")
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
