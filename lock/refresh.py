"""Refresh the lock file: every package ablate and its tests install, resolved and hashed.

    python lock/refresh.py          # writes lock/requirements.in and lock/requirements.lock

torch is left out on purpose: install.sh installs it first, the build that fits the machine
(CPU or CUDA; a CPU machine never downloads a CUDA build), and nothing else here depends on
it. Everything else comes from pyproject.toml's ranges (dependencies and the test extra),
resolved by `uv pip compile --generate-hashes` for Python 3.11 on every platform.
`bash install.sh` installs exactly these versions (`pip --require-hashes`);
`bash install.sh --latest` takes the newest versions the ranges allow instead.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def inputs() -> list[str]:
    """pyproject.toml's dependencies and test extra, without torch."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    return [d for d in deps if not re.match(r"torch\s*([<>=!~;]|$)", d)]


def main() -> int:
    (HERE / "requirements.in").write_text(
        "# written by lock/refresh.py from pyproject.toml (torch left out: install.sh installs it)\n"
        + "\n".join(inputs()) + "\n")
    uv = shutil.which("uv") or sys.exit("lock/refresh.py needs uv: pip install uv")
    cmd = [uv, "pip", "compile", str(HERE / "requirements.in"), "--generate-hashes",
           "--universal", "--python-version", "3.11", "--no-header", "--quiet",
           "-o", str(HERE / "requirements.lock")]
    return subprocess.run(cmd, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
