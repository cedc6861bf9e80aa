"""Progress on the console: a tqdm bar at the bottom of a terminal, with the log's lines written above it (the
console log sink goes through `tqdm.write`, so a bar and a line never share a row); where stderr is not a terminal
(a file, CI) no bar is drawn and a line with the count, the postfix and the ETA is logged every `every_s` seconds
instead."""

from __future__ import annotations

import sys
import time
from typing import Any, Optional

from loguru import logger


def console_sink(message: Any) -> None:
    """loguru's console sink: the line above any bar on stderr (tqdm clears and redraws it)."""
    from tqdm import tqdm

    tqdm.write(str(message), end="", file=sys.stderr)


def duration(seconds: float) -> str:
    """'45s', '3m12s', '1h04m'."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _terminal_columns() -> int:
    """The width of the terminal stderr writes to; 0 when it is no terminal or says it has no width."""
    import os

    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns if sys.stderr.isatty() else 0
    except (AttributeError, OSError, ValueError):  # no fileno (captured), closed, or not a terminal after all
        return 0


class Progress:
    """`total` units of work from `initial`; `update(**postfix)` after each."""

    def __init__(self, total: int, desc: str, initial: int = 0, unit: str = "step", every_s: float = 30.0):
        from tqdm import tqdm

        self.total, self.desc, self.done, self.start_done = total, desc, initial, initial
        self.tty = _terminal_columns() > 0  # a terminal of 0 columns (some pseudo-terminals) gets the lines
        self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True, file=sys.stderr,
                        disable=not self.tty, leave=False)
        self.started = time.monotonic()
        self.every_s, self.logged = every_s, self.started

    def eta(self) -> Optional[float]:
        """Seconds left at this run's pace so far (None before the first unit)."""
        made = self.done - self.start_done
        if made <= 0:
            return None
        return (time.monotonic() - self.started) / made * (self.total - self.done)

    def update(self, n: int = 1, **postfix: Any) -> None:
        self.done += n
        if self.tty:
            self.bar.set_postfix(postfix, refresh=False)
            self.bar.update(n)
            return
        now = time.monotonic()
        if now - self.logged >= self.every_s and self.done < self.total:
            self.logged = now
            shown = "".join(f", {k} {v}" for k, v in postfix.items())
            eta = self.eta()
            logger.info(f"{self.desc}: {self.done}/{self.total}{shown}" + (f", eta {duration(eta)}" if eta else ""))

    def close(self) -> None:
        self.bar.close()


# what quiet_libraries set in this process (a later verbose call takes back only these)
_QUIETED: dict[str, str] = {}
_QUIET_ENV = (("HF_HUB_DISABLE_PROGRESS_BARS", "1"), ("TRANSFORMERS_VERBOSITY", "error"), ("HF_HUB_VERBOSITY", "error"),
              ("DATASETS_VERBOSITY", "error"), ("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1"),
              # each AgentScope agent's printing of every message (thousands of lines a step); read when an agent is
              # made, so agents the workflow builds per episode are quiet. The trajectories and the viewer hold them.
              ("AGENTSCOPE_DISABLE_CONSOLE_OUTPUT", "true"))


def quiet_libraries(verbose: bool = False) -> None:
    """The libraries' own console noise off unless `verbose` (`--verbose`, or ASTUNER_VERBOSE=1 for tune()):
    transformers' and huggingface_hub's progress bars ("Loading weights", "Writing model shards" at every
    checkpoint), their and datasets' advisory warnings ("Repo card metadata block was not found"), deprecation
    warnings raised inside torch / transformers, and AgentScope agents printing each message. Environment variables
    the user set are kept, and they reach Ray's worker processes too; a verbose call after a quiet one in the same
    process (a notebook) takes back what the quiet one set."""
    import os
    import warnings

    verbose = verbose or os.environ.get("ASTUNER_VERBOSE", "") not in ("", "0")
    if verbose:
        for name, value in list(_QUIETED.items()):
            if os.environ.get(name) == value:
                del os.environ[name]
            del _QUIETED[name]
    else:
        for name, value in _QUIET_ENV:
            if name not in os.environ:
                os.environ[name] = _QUIETED[name] = value
        for module in ("torch", "transformers", "peft", "datasets", "huggingface_hub"):
            warnings.filterwarnings("ignore", category=FutureWarning, module=module)
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=module)
    if "transformers" in sys.modules:  # imported before the run (a notebook): its settings were read already
        import transformers

        if verbose:
            transformers.utils.logging.enable_progress_bar()
            transformers.utils.logging.set_verbosity_warning()
        else:
            transformers.utils.logging.disable_progress_bar()
            transformers.utils.logging.set_verbosity_error()
    if "huggingface_hub" in sys.modules:
        import huggingface_hub

        if verbose:
            huggingface_hub.utils.enable_progress_bars()
            huggingface_hub.utils.logging.set_verbosity_warning()
        else:
            huggingface_hub.utils.disable_progress_bars()
            huggingface_hub.utils.logging.set_verbosity_error()
