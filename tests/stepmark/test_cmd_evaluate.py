"""`stepmark evaluate` against tables computed by hand: the sample UI episodes (samples/ui converted and
imported, as scripts/demo.sh does) and the Android-in-the-Zoo sample (tests/pipelines/screenshot_first.py), on
SQLite and PostgreSQL.

Hand table, samples/ui (12 steps with a recorded action; the last screen of the Rico trace and the 4 single
screens have none), 14% of the diagonal: 154 px on 540x960, 411 px on 1440x2560:

| episode | step | recorded | predicted | outcome |
|---|---|---|---|---|
| rico_trace | 0 | TAP (492, 67), box (445, 32, 540, 102) | click (450, 40) | in the box |
| rico_trace | 1 | TAP (270, 661), box (105, 628, 435, 695) | click (270, 800) | 139 px <= 154 |
| rico_trace | 2 | TAP (270, 484), box (0, 441, 540, 526) | click (270, 700) | point: 216 px |
| rico_trace | 3 | TAP (270, 545) | long_press (270, 545) | type |
| rico_trace | 4 | SWIPE y 739 -> 263 (finger up: scroll down) | scroll down | match |
| rico_trace | 5 | TAP (270, 653) | - | missing |
| droidbot | 0 | TAP (1062, 2244), box (737, 2150, 1387, 2339) | click (1062, 2244) | match |
| droidbot | 1 | TAP (1062, 2244); target corrected to "Continue with Facebook" (53, 1926, 1387, 2115) | click (700, 2000) | in the corrected box (437 px from the point: a failure without the correction) |
| droidbot | 2 | TAP (720, 1546) | click (720, 1546) | match |
| step_folder | 0 | TAP (1296, 2294) | click (1296, 2294) | match |
| step_folder | 1 | TAP (1008, 2294) | navigate_back | type |
| step_folder | 2 | TAP (1296, 2294) | click (1300, 2300) | match |

8 of 12 steps (click 7 of 11, scroll 1 of 1); 1 of 3 episodes succeed (droidbot).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipelines.evaluation import runs
from pipelines.store import grounding, open_store
from pipelines.store.models import EpisodeRow, EvaluationResultRow
from protos.rlds_creator import client_pb2
from stepmark.cli import main
from tests.pipelines.screenshot_first import build_aitz

REPO = Path(__file__).resolve().parents[2]
RICO, DROIDBOT, FOLDER = "rico_trace/com.done.faasos", "droidbot/yelp_run", "step_folders/yelp_bookmarks"
AITZ = "GOOGLE_APPS-523638528775825151"


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("evaluate")
    build_aitz(root / "aitz")
    out = {"ui": root / "ui", "aitz": root / "aitz-converted"}
    assert main(["convert-ui", str(REPO / "samples" / "ui"), str(out["ui"]), "--quiet"]) == 0
    assert main(["convert-ui", str(root / "aitz"), str(out["aitz"]), "--quiet"]) == 0
    return out


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """The store options of every command: --data, and --store on PostgreSQL."""
    options = ["--data", str(tmp_path / "data"), "--user", "lead@example.com"]
    if request.param == "postgresql":
        options += ["--store", request.getfixturevalue("pg_url")]
    yield options


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def import_study(capsys, converted: Path, store: list[str], name: str) -> tuple[str, dict[str, Row]]:
    code, out, _ = run(capsys, "import-ui", str(converted), "--study", name, *store)
    assert code == 0
    study = out.strip().splitlines()[-1]
    with open_store(_url(store), _data(store)) as repo, repo._read() as s:
        rows = {r.source_key.removeprefix("ui:"): Row(r.id, r.session_id, r.study_id) for r in s.scalars(sa.select(EpisodeRow))}
    return study, rows


@dataclass(frozen=True)
class Row:
    id: str
    session_id: str
    study_id: str


def _data(store: list[str]) -> str:
    return store[store.index("--data") + 1]


def _url(store: list[str]) -> str | None:
    return store[store.index("--store") + 1] if "--store" in store else None


def write(path: Path, lines: list[object]) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def click(x: float, y: float) -> dict:
    return {"action_type": "click", "x": x, "y": y}


def ui_predictions(study: str, rows: dict[str, Row]) -> list[dict]:
    d = rows[DROIDBOT]
    by_ref = f"{study}/{d.session_id}/{d.id}"  # STUDY/SESSION/EPISODE, as export --episode takes it
    return [
        {"episode": RICO, "step": 0, "action": click(450, 40)},  # the converted id
        {"episode": RICO, "step": 1, "action": click(270, 800)},
        {"episode": RICO, "step": 2, "action": click(270, 700)},
        {"episode": RICO, "step": 3, "action": {"action_type": "long_press", "x": 270, "y": 545}},
        {"episode": RICO, "step": 4, "action": {"action_type": "scroll", "direction": "down"}},
        {"episode": by_ref, "step": 0, "action": click(1062, 2244)},
        {"episode": by_ref, "step": 1, "action": click(700, 2000)},
        {"episode": d.id, "step": 2, "action": click(720, 1546)},  # the store id
        {"episode": FOLDER, "step": 0, "action": click(1296, 2294)},
        {"episode": FOLDER, "step": 1, "action": {"action_type": "navigate_back"}},
        {"episode": FOLDER, "step": 2, "action": click(1300, 2300)},
    ]


def correct_droidbot_step_1(store: list[str], row: Row) -> None:
    """An annotator says step 1's target was "Continue with Facebook" (the player's grounding panel)."""
    from pipelines.episodes import open_episode

    with open_store(_url(store), _data(store)) as repo:
        ref = client_pb2.EpisodeRef(study_id=row.study_id, session_id=row.session_id, episode_id=row.id)
        reader = open_episode(repo.get_episode(ref), _data(store))
        objects = reader.record.episode.time_steps[1].observation.objects
        chosen = next(o for o in objects if o.text == "Continue with Facebook")
        grounding.add(repo, ref, 1, "target", "ann@example.com", object_id=chosen.id, object_index=chosen.index)


def test_sample_ui_episodes_against_the_hand_table(capsys, tmp_path: Path, converted, store) -> None:
    study, rows = import_study(capsys, converted["ui"], store, "Sample UI traces")
    predictions = write(tmp_path / "agent.jsonl", ui_predictions(study, rows))
    code, out, err = run(capsys, "evaluate", "--study", study, "--predictions", str(predictions),
                         "--name", "before", "--json", *store)  # fmt: skip
    assert code == 0, err
    before = json.loads(out)
    assert (before["matched"], before["steps"]) == (7, 12)  # droidbot step 1: 437 px from the recorded point
    assert {(f["episode"], f["step"], f["reason"]) for f in before["failed"]} >= {(rows[DROIDBOT].id, 1, "point")}

    correct_droidbot_step_1(store, rows[DROIDBOT])
    code, out, err = run(capsys, "evaluate", "--study", study, "--predictions", str(predictions), "--json", *store)
    assert code == 0, err
    report = json.loads(out)
    assert report["run"] == "agent"  # the file's name
    assert (report["steps"], report["matched"], report["missing"], report["predictions"]) == (12, 8, 1, 11)
    assert report["accuracy"] == round(8 / 12, 6)
    assert report["per_type"] == {
        "click": {"steps": 11, "matched": 7, "missing": 1, "accuracy": round(7 / 11, 6)},
        "scroll": {"steps": 1, "matched": 1, "missing": 0, "accuracy": 1.0},
    }
    assert report["reasons"] == {"missing": 1, "point": 1, "type": 2}
    assert (report["episodes"], report["episodes_succeeded"], report["unscored_steps"]) == (3, 1, 5)
    failed = [(f["episode"], f["step"], f["reason"]) for f in report["failed"]]
    want = [(rows[RICO].id, 2, "point"), (rows[RICO].id, 3, "type"), (rows[RICO].id, 5, "missing"),
            (rows[FOLDER].id, 1, "type")]  # fmt: skip
    assert sorted(failed) == sorted(want)
    missing = next(f for f in report["failed"] if f["reason"] == "missing")
    assert missing["predicted"] is None and missing["recorded"]["x"] == 270 and missing["recorded"]["y"] == 653
    point = next(f for f in report["failed"] if f["reason"] == "point")
    assert point["predicted"] == {"action_type": "click", "x": 270.0, "y": 700.0}

    code, out, _ = run(capsys, "evaluate", "--study", study, "--predictions", str(predictions), *store)
    assert code == 2  # the name is taken
    code, out, _ = run(capsys, "evaluate", "--study", study, "--predictions", str(predictions), "--replace", *store)
    assert code == 0
    lines = out.splitlines()
    assert lines[1] == "step accuracy: 8/12 (66.7%); missing: 1"
    assert "  click: 7/11 (63.6%), missing 1" in lines and "  scroll: 1/1 (100.0%)" in lines
    assert "episode success: 1/3 (33.3%)" in lines
    assert f"  {rows[FOLDER].id}  1  click " in out and "(none)  missing" in out

    code, out, _ = run(capsys, "evaluate", "--study", study, "--compare", "before", "agent", "--json", *store)
    compared = json.loads(out)
    assert compared["per_type"]["click"]["before"]["matched"] == 6 and compared["per_type"]["click"]["agent"]["matched"] == 7
    assert [(d["episode"], d["step"], d["runs"]["before"]["matched"], d["runs"]["agent"]["matched"])
            for d in compared["differ"]] == [
        (rows[DROIDBOT].id, 1, False, True)
    ]


def test_aitz_sample_against_the_hand_table(capsys, tmp_path: Path, converted, store) -> None:
    """AitZ GOOGLE_APPS-523638528775825151 (270x600; 14% of the diagonal: 92 px): 0 HOME, 1 a swipe with the
    finger moving up (AitZ says "scroll up"; AndroidControl's direction is where the content goes: down),
    2 TAP (164, 299) in box (140, 299, 188, 339), 3 TASK_COMPLETE."""
    study, _ = import_study(capsys, converted["aitz"], store, "AitZ")
    first = [
        {"episode": AITZ, "step": 0, "action": {"action_type": "navigate_home"}},
        {"episode": AITZ, "step": 1, "action": {"action_type": "scroll", "direction": "up"}},
        {"episode": AITZ, "step": 2, "action": click(200, 330)},  # outside the box, 47 px away
        {"episode": AITZ, "step": 3, "action": {"action_type": "status", "goal_status": "complete"}},
    ]
    write(tmp_path / "a.jsonl", first)
    second = [*first[:1], {**first[1], "action": {"action_type": "scroll", "direction": "down"}},
              {**first[2], "action": click(270, 420)}, first[3]]  # fmt: skip
    write(tmp_path / "b.jsonl", second)
    code, out, err = run(capsys, "evaluate", "--study", study, "--predictions", str(tmp_path / "a.jsonl"), "--json", *store)
    assert code == 0, err
    a = json.loads(out)
    assert (a["steps"], a["matched"], a["episodes"], a["episodes_succeeded"]) == (4, 3, 1, 0)
    assert {k: (v["steps"], v["matched"]) for k, v in a["per_type"].items()} == {
        "click": (1, 1), "navigate_home": (1, 1), "scroll": (1, 0), "status": (1, 1)
    }
    assert [(f["step"], f["reason"], f["recorded"]["direction"]) for f in a["failed"]] == [(1, "direction", "down")]
    code, out, _ = run(capsys, "evaluate", "--study", study, "--predictions", str(tmp_path / "b.jsonl"), "--json", *store)
    b = json.loads(out)
    assert [(f["step"], f["reason"]) for f in b["failed"]] == [(2, "point")]  # 169 px > 92
    code, out, _ = run(capsys, "evaluate", "--study", study, "--compare", "a", "b", *store)
    assert code == 0
    assert "scroll         0/1 (0.0%)  |  1/1 (100.0%)" in out
    differ = out.split("steps where they differ (episode, step, recorded, a, b):\n")[1].splitlines()
    assert [line.split()[1:3] for line in differ] == [["1", "scroll"], ["2", "click"]]
    assert differ[0].endswith('direction scroll {"direction": "up"}  |  ok scroll {"direction": "down"}')


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not a JSON object"),
        ({"episode": RICO, "step": 0, "action": {"action_type": "tap"}}, "unknown action_type 'tap'"),
        ({"episode": RICO, "step": 0, "action": click(1, 1), "score": 1}, "unknown key(s) ['score']"),
        ({"episode": RICO, "step": -1, "action": click(1, 1)}, "'step' must be a step index"),
        ({"episode": "nowhere", "step": 0, "action": click(1, 1)}, "episode 'nowhere' is not in study"),
        ({"episode": RICO, "step": 7, "action": click(1, 1)}, "has 7 steps, no step 7"),
        ({"episode": RICO, "step": 6, "action": click(1, 1)}, "has no recorded action to score against (ACTION_UNSPECIFIED)"),
        ({"episode": RICO, "step": 0, "action": click(2, 2)}, "a second prediction for step 0 of episode"),
    ],
)
def test_an_invalid_line_refuses_the_whole_file(capsys, tmp_path: Path, converted, store, line, message) -> None:
    study, _ = import_study(capsys, converted["ui"], store, "Sample UI traces")
    path = write(tmp_path / "bad.jsonl", [{"episode": RICO, "step": 0, "action": click(450, 40)}, "", line])
    code, _, err = run(capsys, "evaluate", "--study", study, "--predictions", str(path), *store)
    assert code == 2
    assert f"{path}:3: " in err and message in err
    if "second prediction" in message:
        assert "(the first is line 1)" in err
    with open_store(_url(store), _data(store)) as repo:
        assert runs.runs(repo, study) == []
        with repo._read() as s:
            assert s.scalar(sa.select(sa.func.count()).select_from(EvaluationResultRow)) == 0


def readme_row() -> str:
    (row,) = [line for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines()
              if line.startswith("| `stepmark evaluate ")]  # fmt: skip
    return row


def test_the_readme_row_runs_as_printed(capsys, tmp_path: Path, converted) -> None:
    """Both commands of the README's row, their placeholders filled in, each option the row names."""
    import re
    import shlex

    store = ["--data", str(tmp_path / "data"), "--user", "lead@example.com"]
    study, _ = import_study(capsys, converted["aitz"], store, "AitZ")
    write(tmp_path / "agent.jsonl", [{"episode": AITZ, "step": 0, "action": {"action_type": "navigate_home"}}])
    write(tmp_path / "other.jsonl", [{"episode": AITZ, "step": 0, "action": {"action_type": "navigate_back"}}])
    commands = re.findall(r"`((?:stepmark )?evaluate [^`]+)`", readme_row().split(" | ")[0])
    assert len(commands) == 2
    fill = {"ID": study, "FILE.jsonl": str(tmp_path / "agent.jsonl"), "RUN": "agent", "A": "agent", "B": "other"}
    run(capsys, "evaluate", "--study", study, "--predictions", str(tmp_path / "other.jsonl"), *store)
    for command in commands:
        words = shlex.split(command.removeprefix("stepmark "))
        argv = [fill.get(w.strip("[]"), w.strip("[]")) for w in words]
        code, out, err = run(capsys, *argv, *store)
        assert code == 0, (argv, err)
        assert json.loads(out)  # --json
    code, out, _ = run(capsys, "evaluate", "--study", study, "--compare", "agent", "other", "--json", *store)
    assert [d["step"] for d in json.loads(out)["differ"]] == [0]


def test_unreadable_files_and_lines_are_named(capsys, tmp_path: Path, converted) -> None:
    store = ["--data", str(tmp_path / "data"), "--user", "lead@example.com"]
    study, _ = import_study(capsys, converted["aitz"], store, "AitZ")
    good = json.dumps({"episode": AITZ, "step": 0, "action": {"action_type": "navigate_home"}}).encode()
    cases = {
        "absent.jsonl": (None, "absent.jsonl: no such file"),
        "latin1.jsonl": (good + b"\n\xe9t\xe9\n", "latin1.jsonl:2: not UTF-8 text"),
        "long.jsonl": (good + b"\n" + b" " * (runs.MAX_LINE + 10) + b"\n", f"long.jsonl:2: line longer than {runs.MAX_LINE} bytes"),
    }
    for name, (data, message) in cases.items():
        if data is not None:
            (tmp_path / name).write_bytes(data)
        code, _, err = run(capsys, "evaluate", "--study", study, "--predictions", str(tmp_path / name), *store)
        assert code == 2 and message in err, err
    code, _, err = run(capsys, "evaluate", "--study", "no-such-study", "--predictions", str(tmp_path / "long.jsonl"), *store)
    assert code == 2 and "study 'no-such-study' not found" in err
    with open_store(None, tmp_path / "data") as repo:
        assert runs.runs(repo, study) == []
