"""The trajectory viewer on a 300-step run: how much the trajectories take on disk, and how long its pages take
to load in headless Chromium (Debian's chromium + chromedriver, driven by Selenium).

    python bench/viewer_load.py [--run launcher_record/tiny_cpu] [--out /tmp/astuner_viewer_bench]
                                [--screenshot docs/viewer_episode.png]

Without --run it trains the README's one-token demo (tutorial/example_tiny_cpu/tiny_cpu.yaml, 300 steps) into
--out first. Page load = from navigation until the page has drawn what it shows (every curve point; every
episode row; every token), best and median of 5 loads each. --screenshot saves the episode page of a trained
sample with tool results inside its response (a multi-turn episode) when the run has one.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def train(out: Path) -> Path:
    from astuner.cli import main

    run = out / "tiny_cpu"
    if not (run / "metrics.jsonl").exists():
        shutil.rmtree(run, ignore_errors=True)
        code = main(["--conf", str(ROOT / "tutorial/example_tiny_cpu/tiny_cpu.yaml"), "--exp-dir", str(out),
                     f"astuner.model.path={out}/model"])
        if code != 0:
            raise SystemExit(f"the demo run failed ({code})")
    return run


def sizes(run: Path) -> dict:
    folder = run / "trajectories"
    episodes = sorted(folder.glob("step_*.jsonl"))
    tokens = sorted(folder.glob("step_*.tokens.jsonl.gz"))
    return {"steps": len(episodes), "episodes_bytes": sum(p.stat().st_size for p in episodes),
            "tokens_bytes": sum(p.stat().st_size for p in tokens)}


def timed_loads(driver, url: str, ready_js: str, repeats: int = 5) -> list[float]:
    times = []
    for _ in range(repeats):
        driver.get("about:blank")
        start = time.perf_counter()
        driver.get(url)
        deadline = start + 60
        while not driver.execute_script(ready_js):
            if time.perf_counter() > deadline:
                raise SystemExit(f"{url} did not finish drawing in 60 s")
            time.sleep(0.005)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path)
    parser.add_argument("--out", type=Path, default=Path("/tmp/astuner_viewer_bench"))
    parser.add_argument("--screenshot", type=Path)
    args = parser.parse_args()
    run = args.run or train(args.out)

    from selenium import webdriver

    from astuner.records.tokens import read_token_records
    from astuner.viewer import start_viewer

    size = sizes(run)
    server = start_viewer(run)
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=shutil.which("chromedriver")))
    try:
        import json

        metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        points = sum(1 for r in metrics if "reward/mean" in r)
        last = max(int(p.name.split("_")[1].split(".")[0]) for p in (run / "trajectories").glob("step_*.jsonl"))
        rows = len((run / "trajectories" / f"step_{last}.jsonl").read_text().splitlines())
        records = read_token_records(run / "trajectories" / f"step_{last}.tokens.jsonl.gz")
        record = next((r for r in records if r["trainer_logprobs"] and 0 in r["loss_mask"][r["prompt_length"]:]),
                      records[0])  # a trained multi-turn sample where there is one
        pages = {
            "run page (curves)": (server.url, f"return document.querySelectorAll('[data-curve=\"reward/mean\"] circle').length >= {points}"),
            f"step page ({rows} episodes)": (f"{server.url}?step={last}", f"return document.querySelectorAll('#episodes tr.episode').length >= {rows}"),
            "episode page": (f"{server.url}?step={last}&episode={record['episode_uuid']}",
                             f"return document.querySelectorAll('.tokens .tok').length >= {len(record['input_ids'])}"),
        }
        print(f"run {run}: {size['steps']} steps with trajectories, {points} metric rows")
        print(f"trajectories: episodes {size['episodes_bytes'] / 1e6:.2f} MB ({size['episodes_bytes'] / max(size['steps'], 1) / 1e3:.1f} kB "
              f"per step), tokens {size['tokens_bytes'] / 1e6:.2f} MB ({size['tokens_bytes'] / max(size['steps'], 1) / 1e3:.1f} kB per step, gzip)")
        print("| page | best | median |\n| --- | --- | --- |")
        for name, (url, ready) in pages.items():
            times = timed_loads(driver, url, ready)
            print(f"| {name} | {min(times) * 1000:.0f} ms | {statistics.median(times) * 1000:.0f} ms |")
        if args.screenshot:
            driver.set_window_size(1400, 1100)
            url, ready = pages["episode page"]
            timed_loads(driver, url, ready, repeats=1)
            driver.save_screenshot(str(args.screenshot))
            print(f"screenshot of {url}: {args.screenshot}")
    finally:
        driver.quit()
        server.shutdown()


if __name__ == "__main__":
    main()
