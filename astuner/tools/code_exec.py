"""`execute_python_code` for agents in training: AgentScope's signature and result format, but the
model-written code runs in a subprocess with a wall-time limit, a memory limit, a file-size limit, a
fresh temporary working directory, a minimal environment, no network (a network namespace, where the
OS allows it), and truncated output."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Any, Callable

from agentscope.message import TextBlock
from agentscope.tool import ToolResponse


@functools.lru_cache(maxsize=1)
def network_isolation_prefix() -> tuple[str, ...]:
    """A command prefix that runs a program without network access, or () where none works here."""
    unshare = shutil.which("unshare")
    if not unshare:
        return ()
    for prefix in ((unshare, "--net"), (unshare, "--net", "--map-root-user")):
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0:
                return prefix
        except (OSError, subprocess.SubprocessError):
            continue
    return ()


def _limits(memory_bytes: int, cpu_seconds: int, file_bytes: int) -> Callable[[], None]:
    def apply() -> None:
        import resource

        os.setsid()
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> tuple[bytes, int]:
    kept, dropped = bytearray(), 0
    while chunk := await stream.read(65536):
        room = cap - len(kept)
        kept += chunk[:room]
        dropped += max(len(chunk) - room, 0)
    return bytes(kept), dropped


def _text(data: bytes, dropped: int) -> str:
    text = data.decode("utf-8", errors="replace")
    return text + (f"\n...[{dropped} more bytes truncated]" if dropped else "")


def make_execute_python_code(timeout_s: float = 10.0, memory_mb: int = 1024, max_output_chars: int = 4000,
                             file_mb: int = 64, isolate_network: bool = True) -> Callable[..., Any]:
    """An `execute_python_code` tool with these limits (register it in an AgentScope Toolkit)."""

    async def execute_python_code(code: str, timeout: float = 300, **kwargs: Any) -> ToolResponse:
        """Execute the given python code in a temp file and capture the return code, standard output and
        error. Note you must `print` the output to get the result, and the tmp file will be removed right
        after the execution.

        Args:
            code (`str`):
                The Python code to be executed.
            timeout (`float`, defaults to `300`):
                The maximum time (in seconds) allowed for the code to run.

        Returns:
            `ToolResponse`:
                The response containing the return code, standard output, and standard error of the
                executed code.
        """
        limit = max(0.1, min(float(timeout), timeout_s))
        with tempfile.TemporaryDirectory(prefix="astuner_code_") as workdir:
            path = os.path.join(workdir, "main.py")
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(code)
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": workdir, "TMPDIR": workdir,
                   "PYTHONUTF8": "1", "PYTHONIOENCODING": "utf-8", "LANG": "C.UTF-8"}
            prefix = network_isolation_prefix() if isolate_network else ()
            proc = await asyncio.create_subprocess_exec(
                *prefix, sys.executable, "-I", "-u", path, cwd=workdir, env=env,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                preexec_fn=_limits(memory_mb * 2**20, int(limit) + 1, file_mb * 2**20))
            readers = asyncio.gather(_read_capped(proc.stdout, max_output_chars * 4),
                                     _read_capped(proc.stderr, max_output_chars * 4))
            timed_out = False
            try:
                await asyncio.wait_for(proc.wait(), limit)
            except asyncio.TimeoutError:
                timed_out = True
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                await proc.wait()
            (out, out_dropped), (err, err_dropped) = await readers
        stdout = _text(out, out_dropped)
        stderr = _text(err, err_dropped)
        if len(stdout) > max_output_chars:
            stdout = stdout[:max_output_chars] + f"\n...[{len(stdout) - max_output_chars} more characters truncated]"
        if len(stderr) > max_output_chars:
            stderr = stderr[-max_output_chars:]
        returncode = proc.returncode
        if timed_out:
            returncode = -1
            stderr = (stderr + "\n" if stderr else "") + f"TimeoutError: the code ran over {limit:g} seconds."
        return ToolResponse(content=[TextBlock(type="text", text=f"<returncode>{returncode}</returncode>"
                                                                 f"<stdout>{stdout}</stdout><stderr>{stderr}</stderr>")])

    return execute_python_code


execute_python_code = make_execute_python_code()
