"""What the code tool's sandbox costs per call: `execute_python_code` (bubblewrap: new namespaces, tmpfs,
limits) against a bare `python -I` subprocess running the same code, side by side in one run.

    python bench/sandbox_overhead.py [--calls 20] [--concurrent 32]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from astuner.tools import make_execute_python_code
from astuner.tools.sandbox import python_for_sandbox

CODE = "print(sum(range(1000)))"


async def bare(python: str) -> None:
    proc = await asyncio.create_subprocess_exec(python, "-I", "-c", CODE, stdout=asyncio.subprocess.PIPE)
    await proc.communicate()


async def measure(calls: int, concurrent: int) -> None:
    tool = make_execute_python_code()
    python = python_for_sandbox()
    runners = {"sandboxed (bubblewrap)": lambda: tool(CODE), "bare subprocess": lambda: bare(python)}
    rows = {}
    for name, call in runners.items():
        await call()  # warm
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            await call()
            times.append(time.perf_counter() - started)
        started = time.perf_counter()
        await asyncio.gather(*[call() for _ in range(concurrent)])
        rows[name] = (statistics.median(times), time.perf_counter() - started)
    print(f"| runner | median per call ({calls} one after another) | {concurrent} at once, total |")
    print("| --- | --- | --- |")
    for name, (median, together) in rows.items():
        print(f"| {name} | {median * 1000:.0f} ms | {together:.2f} s |")
    ratio = rows["sandboxed (bubblewrap)"][0] / rows["bare subprocess"][0]
    print(f"\nsandboxed / bare, per call: {ratio:.2f} (python: {python}, {sys.platform})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=32)
    args = parser.parse_args()
    asyncio.run(measure(args.calls, args.concurrent))
