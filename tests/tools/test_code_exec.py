"""The sandboxed execute_python_code tool."""

from __future__ import annotations

import asyncio
import time

from astuner.tools import make_execute_python_code


def run(code, **limits):
    response = asyncio.run(make_execute_python_code(**limits)(code))
    return response.content[0]["text"]


def test_result_format_matches_agentscope():
    assert run("print(2 + 3)") == "<returncode>0</returncode><stdout>5\n</stdout><stderr></stderr>"


def test_errors_are_reported():
    text = run("raise ValueError('boom')")
    assert text.startswith("<returncode>1</returncode>") and "ValueError: boom" in text


def test_wall_time_limit_kills_the_process():
    started = time.perf_counter()
    text = run("while True: pass", timeout_s=1)
    assert time.perf_counter() - started < 20  # killed at 1 s (the rest: a loaded machine's start-up and slack)
    assert "<returncode>-1</returncode>" in text and "TimeoutError" in text


def test_model_cannot_raise_the_time_limit():
    started = time.perf_counter()
    asyncio.run(make_execute_python_code(timeout_s=1)("import time; time.sleep(30)", timeout=300))
    assert time.perf_counter() - started < 20  # not the 30 s the code sleeps


def test_memory_limit():
    text = run("x = bytearray(2 * 1024 ** 3)", memory_mb=256)
    assert "MemoryError" in text


def test_output_is_truncated():
    text = run("print('a' * 100000)", max_output_chars=1000)
    assert len(text) < 2000 and "truncated" in text


def test_runs_in_a_fresh_working_folder():
    text = run("import os; print(os.getcwd()); print(sorted(os.listdir('.'))); open('x', 'w').write('1')")
    assert "/work\n['main.py']" in text
    assert "['main.py']" in run("import os; print(sorted(os.listdir('.')))")  # nothing left from the last run
