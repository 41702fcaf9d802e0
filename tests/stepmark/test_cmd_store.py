"""`stepmark study ...` and `stepmark import-ui` through `stepmark.cli.main`, on a real data directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.store import open_store
from stepmark.cli import main
from tests.conftest import REPO_ROOT

EXAMPLE = REPO_ROOT / "schemas" / "examples" / "procgen_study.yaml"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def data(tmp_path: Path) -> str:
    return str(tmp_path / "data")


def test_create_list_show_enable_disable(capsys, data: str) -> None:
    code, out, _ = run(capsys, "study", "create", str(EXAMPLE), "--data", data, "--user", "ann")
    assert code == 0
    study_id = out.strip().splitlines()[-1]
    assert "Procgen maze" in out and "maze, pong" in out

    with open_store(None, data) as repo:  # the default SQLite file under --data
        study = repo.get_study(study_id)
    assert study.creator.email == "ann"
    maze = study.environment_specs[0]
    assert (maze.id, maze.sync, maze.max_episode_steps, maze.procgen.id) == ("maze", True, 50, "maze")
    assert study.environment_specs[1].atari.id == "Pong"

    code, out, _ = run(capsys, "study", "list", "--data", data)
    header, row = out.strip().splitlines()
    assert header.split() == ["ID", "NAME", "STATE", "CREATOR", "ENVS", "EPISODES"]
    assert row.split() == [study_id, "Procgen", "maze", "enabled", "ann", "maze,pong", "0"]

    code, out, _ = run(capsys, "study", "show", study_id, "--data", data)
    shown = json.loads(out)
    assert shown["id"] == study_id and shown["state"] == "STATE_ENABLED"
    assert shown["environment_specs"][0]["procgen"]["distribution_mode"] == "DISTRIBUTION_EASY"

    code, _, err = run(capsys, "study", "disable", study_id, "--data", data, "--user", "bob")
    assert code == 2 and "only the creator (ann) may disable" in err and len(err.strip().splitlines()) == 1
    code, out, _ = run(capsys, "study", "disable", study_id, "--data", data, "--user", "ann")
    assert code == 0 and "disabled" in out and out.strip().splitlines()[-1] == study_id
    code, out, _ = run(capsys, "study", "list", "--data", data, "--creator", "ann")
    assert "disabled" in out
    code, out, _ = run(capsys, "study", "enable", study_id, "--data", data, "--user", "ann")
    assert code == 0 and "enabled" in out
    code, _, err = run(capsys, "study", "show", "missing", "--data", data)
    assert code == 2 and "study 'missing' not found" in err
    code, out, _ = run(capsys, "study", "list", "--data", str(Path(data) / "other"))
    assert out.strip() == "no studies"


def test_store_url_option(capsys, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'team.db'}"
    code, out, _ = run(capsys, "study", "create", str(EXAMPLE), "--store", url, "--data", str(tmp_path / "d"))
    assert code == 0
    with open_store(url, tmp_path / "unused") as repo:
        assert [s.id for s in repo.list_studies()] == [out.strip().splitlines()[-1]]
    assert not (tmp_path / "d" / "stepmark.db").exists()


BAD_SPECS = [
    ("invalid.yaml", "name: [unclosed\n", "invalid YAML at line 2 column 1"),
    ("invalid.json", '{"name": "x",}', "invalid JSON at line 1 column 14"),
    ("unknown.yaml", "name: x\ncolour: red\n", "unknown field 'colour'"),
    (
        "nested_unknown.yaml",
        "name: x\nenvironment_specs:\n  - id: a\n    procgen: {id: maze, levels: 3}\n",
        "environment_specs[0].procgen: unknown field 'levels'",
    ),
    (
        "enum.yaml",
        "name: x\nenvironment_specs:\n  - id: a\n    procgen: {distribution_mode: DISTRIBUTION_EASYY}\n",
        "field environment_specs[0].procgen.distribution_mode: 'DISTRIBUTION_EASYY' is not one of",
    ),
    (
        "type.yaml",
        "name: x\nenvironment_specs:\n  - id: a\n    max_episode_steps: fifty\n",
        "field environment_specs[0].max_episode_steps: 'fifty' is not of type 'integer'",
    ),
    (
        "type.json",
        '{"name": "x", "environmentSpecs": [{"id": "a", "sync": "yes"}]}',
        "field environmentSpecs[0].sync: 'yes' is not of type 'boolean'",
    ),
    (
        "oneof.yaml",
        "name: x\nenvironment_specs:\n  - id: a\n    procgen: {id: maze}\n    net_hack: {id: NetHackScore-v0}\n",
        "environment_specs[0]: set only one of procgen, atari, dmlab, net_hack, robosuite, robodesk",
    ),
    (
        "twice.yaml",
        "name: x\nenvironment_specs:\n  - id: a\n    maxEpisodeSteps: 5\n    max_episode_steps: 6\n",
        "field environment_specs[0].max_episode_steps is given twice",
    ),
    ("noname.yaml", "description: nameless\n", "field name is required"),
    (
        "noid.yaml",
        "name: x\nenvironment_specs:\n  - {name: A}\n",
        "field environment_specs[0].id is required",
    ),
    (
        "dupid.yaml",
        "name: x\nenvironment_specs:\n  - {id: a}\n  - {id: a}\n",
        "field environment_specs[1].id 'a' is used twice",
    ),
    ("list.yaml", "- name: x\n", "a study spec must be a mapping at the top level, not list"),
    ("empty.yaml", "", "the file is empty"),
    (
        "big.yaml",
        "name: x\nenvironment_specs:\n  - {id: a, max_episode_steps: 3000000000}\n",
        "is greater than",
    ),
    ("spec.txt", "name: x\n", "must end in .json, .yaml or .yml"),
    (  # "billion laughs": nine levels of nine aliases, a few hundred bytes that expand to 387M values
        "aliases.yaml",
        "name: x\na: &a [l, l, l, l, l, l, l, l, l]\n"
        + "".join(
            f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
        ),
        "more than 100000 values",
    ),
    ("deep.yaml", "name: x\ndescription: " + "[" * 50_000 + "]" * 50_000 + "\n", "nested too deeply"),
    ("deep.json", '{"name": "x", "description": ' + "[" * 50_000 + "]" * 50_000 + "}", "nested too deeply"),
    ("nested.json", '{"name": "x", "description": ' + "[" * 100 + "]" * 100 + "}", "nested more than 64"),
    ("huge.yaml", "name: x\n" + "# padding\n" * 120_000, "larger than 1 MiB"),
]


@pytest.mark.parametrize(("name", "text", "message"), BAD_SPECS, ids=[b[0] for b in BAD_SPECS])
def test_bad_spec_files(capsys, tmp_path: Path, data: str, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    code, out, err = run(capsys, "study", "create", str(path), "--data", data, "--user", "ann")
    assert code == 2 and out == ""
    [line] = err.strip().splitlines()
    assert line.startswith(f"stepmark study: error: {path}: ")
    assert message in line
    with open_store(None, data) as repo:
        assert repo.list_studies() == []


def test_missing_spec_file(capsys, tmp_path: Path, data: str) -> None:
    code, _, err = run(capsys, "study", "create", str(tmp_path / "nope.yaml"), "--data", data)
    assert code == 2 and f"{tmp_path / 'nope.yaml'}: no such file" in err


def test_read_only_fields_in_a_spec_file_are_ignored(capsys, tmp_path: Path, data: str) -> None:
    path = tmp_path / "exported.yaml"
    path.write_text(
        "name: x\ncreator: {email: someone@else}\ncreation_time: 2020-01-02T03:04:05Z\nstate: STATE_DISABLED\n"
    )
    code, out, _ = run(capsys, "study", "create", str(path), "--data", data, "--user", "ann")
    assert code == 0
    with open_store(None, data) as repo:
        study = repo.get_study(out.strip().splitlines()[-1])
    assert study.creator.email == "ann" and study.state == study.STATE_ENABLED
    assert study.creation_time.ToDatetime().year > 2020


def test_import_ui_command(capsys, tmp_path: Path, data: str, fixtures_dir: Path) -> None:
    out_dir = tmp_path / "converted"
    assert main(["convert-ui", str(fixtures_dir / "droidbot"), str(out_dir), "--quiet"]) == 0
    capsys.readouterr()
    code, out, _ = run(capsys, "import-ui", str(out_dir), "--study", "Yelp", "--data", data, "--user", "ann")
    assert code == 0 and "imported 1 episode(s) into study 'Yelp' (0 already there)" in out
    study_id = out.strip().splitlines()[-1]
    code, out, _ = run(capsys, "import-ui", str(out_dir), "--study", "Yelp", "--data", data, "--user", "ann")
    assert (
        "imported 0 episode(s)" in out
        and "(1 already there)" in out
        and out.strip().splitlines()[-1] == study_id
    )
    code, out, _ = run(capsys, "study", "list", "--data", data)
    assert out.strip().splitlines()[1].split()[-2:] == ["android-ui", "1"]
    code, _, err = run(capsys, "import-ui", str(tmp_path / "nothing"), "--study", "Yelp", "--data", data)
    assert code == 2 and "no such file or folder" in err


UNUSABLE_ENVS = [
    ("procgen.yaml", "procgen: {id: mazee}", "unknown Procgen game 'mazee'"),
    ("atari.yaml", "atari: {id: Pongg}", "unknown Atari game 'Pongg'"),
    ("nethack.yaml", "net_hack: {id: NetHackScoree-v0}", "unknown NetHack task 'NetHackScoree-v0'"),
    ("robodesk.yaml", "robodesk: {task: open_slidee}", "unknown RoboDesk task 'open_slidee'"),
    ("robosuite.yaml", "robosuite: {id: Lift, robots: [Pandaa]}", "unknown robot(s) ['Pandaa']"),
    ("steps.yaml", "max_episode_steps: -1\n    procgen: {id: maze}", "max_episode_steps must be >= 0"),
]


@pytest.mark.parametrize(("name", "env", "message"), UNUSABLE_ENVS, ids=[u[0] for u in UNUSABLE_ENVS])
def test_create_builds_each_environment_and_names_the_bad_one(
    capsys, tmp_path: Path, data: str, name: str, env: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(
        f"name: x\nenvironment_specs:\n  - id: ok\n    procgen: {{id: maze}}\n  - id: bad\n    {env}\n"
    )
    code, out, err = run(capsys, "study", "create", str(path), "--data", data)
    assert code == 2 and out == ""
    [line] = [x for x in err.strip().splitlines() if x.startswith("stepmark")]
    assert line.startswith(f"stepmark study: error: {path}: environment_specs[1] (id 'bad'): ")
    assert message in line
    with open_store(None, data) as repo:
        assert repo.list_studies() == []


def test_create_no_check_keeps_the_spec_and_notes_what_cannot_run(capsys, tmp_path: Path, data: str) -> None:
    path = tmp_path / "later.yaml"
    path.write_text(
        "name: x\nenvironment_specs:\n  - {id: typo, procgen: {id: mazee}}\n"
        "  - {id: lab, dmlab: {id: seekavoid_arena_01}}\n  - {id: ui}\n"
    )
    code, _, _ = run(capsys, "study", "create", str(path), "--data", data)
    assert code == 2
    code, out, err = run(capsys, "study", "create", str(path), "--data", data, "--no-check")
    assert code == 0 and err == ""
    path.write_text(
        "name: y\nenvironment_specs:\n  - {id: lab, dmlab: {id: seekavoid_arena_01}}\n  - {id: ui}\n"
    )
    code, out, err = run(capsys, "study", "create", str(path), "--data", data)
    assert code == 0
    notes = err.strip().splitlines()
    assert notes[0].startswith("note: environment 'lab': kept but cannot be recorded here: DMLab")
    assert notes[1].startswith("note: environment 'ui': no environment type")
    with open_store(None, data) as repo:
        assert len(repo.list_studies()) == 2


def test_create_with_a_taken_name_names_the_file_and_field(capsys, tmp_path: Path, data: str) -> None:
    path = tmp_path / "named.yaml"
    path.write_text("name: Same\n")
    assert run(capsys, "study", "create", str(path), "--data", data, "--user", "ann")[0] == 0
    code, out, err = run(capsys, "study", "create", str(path), "--data", data, "--user", "ann")
    assert code == 2 and out == ""
    assert err.startswith(f"stepmark study: error: {path}: field name: ann already has a study named 'Same'")
    assert run(capsys, "study", "create", str(path), "--data", data, "--user", "bob")[0] == 0  # per creator


def test_create_with_a_taken_id_names_the_file_and_field(capsys, tmp_path: Path, data: str) -> None:
    path = tmp_path / "fixed.yaml"
    path.write_text("id: fixed\nname: x\n")
    assert run(capsys, "study", "create", str(path), "--data", data)[0] == 0
    code, out, err = run(capsys, "study", "create", str(path), "--data", data)
    assert code == 2 and out == ""
    assert (
        err.strip()
        == f"stepmark study: error: {path}: field id: study 'fixed' already exists (remove the id for a new one)"
    )
