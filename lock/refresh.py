"""Refresh the lock file: every package ablate and its tests install, resolved and hashed.

    python lock/refresh.py          # writes lock/requirements.in and lock/requirements.lock

torch is left out on purpose: install.sh installs it first, the build that fits the machine
(CPU or CUDA; a CPU machine never downloads a CUDA build). A package that requires torch
(ogb, of the test extra) does not bring it back: lock/overrides.txt gives torch a marker no
Python >= 3.11 matches, so the resolver drops it and its CUDA dependencies. Everything else
comes from pyproject.toml's ranges (dependencies and the test extra), resolved by
`uv pip compile --generate-hashes` for Python 3.11 and later on every platform.
The packages whose version shapes data (`ablate.data.SLIC_PINNED`: SLIC's kernels are part of
the MNIST-75SP recipe) are constrained to the pinned minor for every Python, so one lock gives
the same recipe hashes and trial ids on 3.11 and 3.12+ (`tests/test_dependencies.py`).
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


def slic_pinned() -> dict[str, str]:
    """`ablate.data.SLIC_PINNED`, read from its source (no import: refresh runs before install)."""
    text = (ROOT / "ablate" / "data" / "__init__.py").read_text()
    block = re.search(r"^SLIC_PINNED = (\{.*?\})", text, re.M).group(1)
    return dict(re.findall(r'"([^"]+)": "([^"]+)"', block))


def main() -> int:
    (HERE / "requirements.in").write_text(
        "# written by lock/refresh.py from pyproject.toml (torch left out: install.sh installs it)\n"
        + "\n".join(inputs()) + "\n")
    uv = shutil.which("uv") or sys.exit("lock/refresh.py needs uv: pip install uv")
    (HERE / "constraints.txt").write_text(
        "# written by lock/refresh.py: one minor of each package that shapes data, every Python\n"
        + "".join(f"{name}=={minor}.*\n" for name, minor in slic_pinned().items()))
    (HERE / "overrides.txt").write_text(
        "# written by lock/refresh.py: torch is install.sh's (a marker no Python >= 3.11 meets)\n"
        "torch ; python_full_version < '3.11'\n")
    cmd = [uv, "pip", "compile", str(HERE / "requirements.in"), "--generate-hashes",
           "--universal", "--python-version", "3.11", "--no-header", "--quiet",
           "-c", str(HERE / "constraints.txt"), "--overrides", str(HERE / "overrides.txt"),
           "-o", str(HERE / "requirements.lock")]
    return subprocess.run(cmd, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
