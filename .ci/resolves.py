"""Does a pip install step resolve in this environment, to versions that satisfy every requirement it names
and those of the packages it must keep working? `python .ci/resolves.py [--keep DIST]... REQUIREMENT...` (run
with the environment's python): pip's dry run (package metadata only, nothing installed), then each named
requirement, and each requirement of a kept distribution, checked against what the environment would hold
after it (pip installs what one command names without holding the packages already there to their pins).
Used by .ci/backbones for the README's GPU install steps, which CI cannot run for real."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import tempfile

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def main(args: list[str]) -> int:
    keep = [args[i + 1] for i, arg in enumerate(args) if arg == "--keep"]
    requirements = [arg for i, arg in enumerate(args) if arg != "--keep" and (i == 0 or args[i - 1] != "--keep")]
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report",
                               report.name, *requirements], capture_output=True, text=True)
        if proc.returncode:
            print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
            print(f"pip cannot resolve: {' '.join(requirements)}", file=sys.stderr)
            return 1
        planned = {canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
                   for item in json.load(open(report.name))["install"]}
    failed = []
    kept = [text for dist in keep for text in importlib.metadata.requires(dist) or []
            if Requirement(text).marker is None or Requirement(text).marker.evaluate({"extra": ""})]
    for text in requirements + kept:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        try:
            version = planned.get(name) or importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = None
        if version is None or not req.specifier.contains(version, prereleases=True):
            failed.append(f"{text} (would be {version})")
    changed = ", ".join(f"{name} {version}" for name, version in sorted(planned.items()))
    if failed:
        print(f"resolves, but not as asked: {'; '.join(failed)}", file=sys.stderr)
        return 1
    print(f"resolves: {' '.join(requirements)} -> installs {changed}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
