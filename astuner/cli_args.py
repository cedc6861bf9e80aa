"""The command line's argument parser: a usage error is one line, as every other astuner error is."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """argparse with its usage errors (an unknown option, an invalid choice, a missing --conf) said in one line
    that points at --help, instead of the usage block followed by the error."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)
