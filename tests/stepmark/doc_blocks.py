"""Running a documentation page's one bash block as printed: in a fresh folder holding only `samples/` and
`.venv` (links to the repository's), with the repository on PYTHONPATH."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def block(page: str) -> str:
    """The page's only bash block (`page` relative to the repository, e.g. "docs/study_fields.md")."""
    (bash,) = re.findall(r"```bash\n(.*?)```", (REPO / page).read_text(encoding="utf-8"), flags=re.S)
    return bash


def run_block(page: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """Run `page`'s bash block in `folder`; the caller asserts on the result."""
    (folder / "samples").symlink_to(REPO / "samples")
    (folder / ".venv").symlink_to(REPO / ".venv")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(["bash", "-c", "set -euo pipefail\n" + block(page)], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
