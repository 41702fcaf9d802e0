"""Studies and predictions files for the evaluation tests: the sample UI traces (samples/ui) converted and
imported as scripts/demo.sh does, and predictions that repeat each recorded action (changed where asked)."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa

from pipelines.episodes.ui import open_ui_episode
from pipelines.evaluation import matching
from pipelines.store.models import EpisodeRow

REPO = Path(__file__).resolve().parents[3]


def import_samples(repo, data_dir: Path, user: str, name: str = "Sample UI traces"):  # noqa: ANN001, ANN201
    """samples/ui converted under `data_dir` and imported as a study (its StudySpec)."""
    from pipelines import convert, ui_import

    out = data_dir / "converted-samples"
    assert convert.run([str(REPO / "samples" / "ui"), str(out), "--runner=FnApiRunner"]) in (0, None)
    return ui_import.import_ui(repo, str(out), name, user)


def recorded_actions(repo, data_dir: Path, study_id: str) -> list[tuple[EpisodeRow, int, matching.Recorded]]:  # noqa: ANN001
    """(episode row, step, recorded action) of every scorable step of the study, by episode id and step."""
    with repo._read() as s:
        rows = list(s.scalars(sa.select(EpisodeRow).where(EpisodeRow.study_id == study_id).order_by(EpisodeRow.id)))
        s.expunge_all()
    out = []
    for row in rows:
        record = open_ui_episode(row.meta["ui_record"], data_dir).record
        for i, action in enumerate(record.actions):
            obs = record.episode.time_steps[i].observation
            step = matching.recorded(action, None, obs.screen_width, obs.screen_height)
            if step is not None:
                out.append((row, i, step))
    return out


def as_prediction(step: matching.Recorded) -> dict:
    """The predicted action that repeats a recorded one."""
    action: dict = {"action_type": step.action_type}
    if step.action_type in ("click", "long_press"):
        action.update(x=step.x, y=step.y)
    elif step.action_type == "scroll":
        action["direction"] = step.direction
    elif step.action_type == "input_text":
        action["text"] = step.text
    elif step.action_type == "open_app":
        action["app_name"] = step.text
    elif step.action_type == "status":
        action["goal_status"] = step.text
    return action


def write_predictions(path: Path, steps, changed: dict[tuple[str, int], dict] | None = None) -> Path:  # noqa: ANN001
    """One line per step, repeating the recorded action, or `changed[(episode id, step)]`."""
    changed = changed or {}
    lines = [{"episode": row.id, "step": i, "action": changed.get((row.id, i), as_prediction(step))}
             for row, i, step in steps]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path
