"""The README's two commands, as printed: `bash scripts/demo.sh` runs the main job on the bundled sample data
(in a temporary data and output folder, the annotator skipped with STEPMARK_NO_ANNOTATE=1 as the README says),
and `.ci/run` is exactly `bash scripts/test.sh` (this suite is what that command runs, so it cannot run it)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def _two_commands() -> list[str]:
    section = README.split("## The two commands", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_readme_prints_the_two_commands_and_ci_runs_the_second() -> None:
    assert _two_commands() == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "exec bash scripts/test.sh" in ci


def test_the_main_job_runs_as_printed_on_the_sample_data(tmp_path: Path) -> None:
    command = _two_commands()[0]
    env = {
        **os.environ,
        "STEPMARK_NO_ANNOTATE": "1",
        "STEPMARK_DATA": str(tmp_path / "data"),
        "STEPMARK_DEMO_OUT": str(tmp_path / "out"),
    }
    done = subprocess.run(
        command.split(), cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    # Step 1's counters, as the README quotes them.
    assert re.search(r"converted 7 of 7 episodes \(\d+ steps, \d+ objects\)", output), output[-4000:]
    summary = json.loads((tmp_path / "out" / "ui-episodes" / "summary.json").read_text())
    assert summary, "convert-ui wrote an empty summary"
    assert list((tmp_path / "out" / "ui-episodes").glob("episodes-*.tfrecord"))
    # Steps 3-5: a store with the study, two recorded episodes, an envlogger dataset with a marker.
    assert (tmp_path / "data" / "stepmark.db").is_file()
    rlds = tmp_path / "out" / "procgen-rlds"
    assert rlds.is_dir() and any(rlds.rglob("*.riegeli")), sorted(p.name for p in rlds.rglob("*"))[:20]
    # Library noise never reaches the user (issue 32, item 6).
    for noise in ("Ignoring error due to empty step offset file", "forgot to call close", "A.L.E: Arcade"):
        assert noise not in output, noise
