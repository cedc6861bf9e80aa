"""The command line's argument parser: a usage error is one line, as every other astuner error is."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, NoReturn, Sequence


class OneLineParser(argparse.ArgumentParser):
    """argparse with its usage errors (an unknown option, an invalid choice, a missing --conf) said in one line
    that points at --help, instead of the usage block followed by the error."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def say_error(message: str) -> None:
    """One line on stderr; paths under the working folder shown relative to it (as the user typed them)."""
    import os

    cwd = os.getcwd().rstrip(os.sep) + os.sep
    print(f"astuner: error: {' '.join(message.replace(cwd, '').splitlines())}", file=sys.stderr)


def run_command(parser: argparse.ArgumentParser, run: Callable[[argparse.Namespace], int], argv: Sequence[str],
                intermixed: bool = False) -> int:
    """A subcommand's main: its arguments parsed (a usage error: exit 2, said by the parser), `run(args)`'s exit
    code; a user error (AstunerError) one line per problem with its exit code, Ctrl-C 130, anything else an internal
    failure: its traceback logged, one line, 1."""
    try:
        args = parser.parse_intermixed_args(list(argv)) if intermixed else parser.parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    from astuner.errors import AstunerError

    try:
        return run(args)
    except AstunerError as exc:
        for line in getattr(exc, "lines", [str(exc)]):
            say_error(line)
        return exc.exit_code
    except KeyboardInterrupt:
        print("astuner: error: interrupted", file=sys.stderr)
        return 130
    except Exception:
        import traceback

        from loguru import logger

        logger.error(f"internal failure:\n{traceback.format_exc()}")
        print("astuner: error: internal failure (traceback above); please report it with the command you ran",
              file=sys.stderr)
        return 1
