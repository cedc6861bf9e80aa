"""`python -m astuner` runs the `astuner` command."""

import sys

from astuner.cli import main

sys.exit(main())
