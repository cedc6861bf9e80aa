"""`execute_python_code` for agents in training: AgentScope's signature and result format, but the
model-written code runs in a bubblewrap sandbox (`astuner.tools.sandbox`) with a wall-time limit the
model cannot raise, memory / file / process limits, no network, no view of this machine's files or
processes, and truncated output. Where no sandbox can be built the tool runs nothing and says why."""

from __future__ import annotations

from typing import Any, Callable

from agentscope.message import TextBlock
from agentscope.tool import ToolResponse
from loguru import logger

from astuner.tools.sandbox import Limits, SandboxUnavailable, run_python


def _text(data: bytes, dropped: int) -> str:
    text = data.decode("utf-8", errors="replace")
    return text + (f"\n...[{dropped} more bytes truncated]" if dropped else "")


def _response(returncode: int, stdout: str, stderr: str) -> ToolResponse:
    return ToolResponse(content=[TextBlock(type="text", text=f"<returncode>{returncode}</returncode>"
                                                             f"<stdout>{stdout}</stdout><stderr>{stderr}</stderr>")])


def make_execute_python_code(timeout_s: float = 10.0, memory_mb: int = 1024, max_output_chars: int = 4000,
                             file_mb: int = 64, max_processes: int = 32,
                             python: str | None = None) -> Callable[..., Any]:
    """An `execute_python_code` tool with these limits (register it in an AgentScope Toolkit). `python` is
    the interpreter run inside the sandbox (default: this one's base interpreter where the sandbox user
    can read it, else /usr/bin/python3); the sandbox sees its standard library only."""
    warned: list[str] = []

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
        limits = Limits(wall_s=limit, memory_mb=memory_mb, file_mb=file_mb, processes=max_processes)
        try:
            outcome = await run_python(code, limits, python=python, output_cap=max_output_chars * 4)
        except (SandboxUnavailable, OSError) as exc:
            if not warned:
                warned.append(str(exc))
                logger.error(f"execute_python_code ran nothing: {exc}")
            return _response(-1, "", f"SandboxUnavailable: {exc}")
        stdout = _text(outcome.stdout, outcome.stdout_dropped)
        stderr = _text(outcome.stderr, outcome.stderr_dropped)
        if len(stdout) > max_output_chars:
            stdout = stdout[:max_output_chars] + f"\n...[{len(stdout) - max_output_chars} more characters truncated]"
        if len(stderr) > max_output_chars:
            stderr = stderr[-max_output_chars:]
        returncode = outcome.returncode
        if outcome.timed_out:
            returncode = -1
            stderr = (stderr + "\n" if stderr else "") + f"TimeoutError: the code ran over {limit:g} seconds."
        return _response(returncode, stdout, stderr)

    return execute_python_code


execute_python_code = make_execute_python_code()
