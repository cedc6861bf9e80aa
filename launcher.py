"""Run the astuner CLI from a checkout (VS Code's launch.json uses this file as its program):

    python launcher.py --backbone debug --conf tutorial/example_math_agent/math_agent.yaml
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from astuner.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
