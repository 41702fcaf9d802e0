"""Issue 36: a bucket URL is never taken for a local path. `record --data s3://bars/episodes` wrote the episodes
into a local folder `s3:/bars/episodes`; every option that only a local disk can hold (`--data` and
STEPMARK_DATA of every command, SPEC and FILE of the store commands, --login-config, the annotator's settings,
`python -m pipelines.export` / `pipelines.suggest`) now refuses a URL in one line, exit code 2, nothing made.
Commands that read and write buckets (convert-ui, inspect, import-ui, report, export --out, copy) are covered
with real buckets by tests/pipelines/test_bucket_layouts.py, test_scale_out.py and test_readme_scale_out.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines import storage
from pipelines.errors import StepmarkError
from stepmark.cli import main
from tests.conftest import REPO_ROOT
from tests.pipelines.episodes.helpers import make_study, new_store, procgen_spec

URL = "s3://bars/episodes"


@pytest.fixture
def study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A real study in a SQLite store given by --store (as in the issue), and an empty working directory."""
    store_dir = tmp_path / "store"
    with new_store(store_dir) as repo:
        study_id = make_study(repo, procgen_spec(max_steps=6)).id
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("STEPMARK_DATA", raising=False)
    monkeypatch.setattr("annotator.launch.run", _no_server)  # a refused `annotate` never gets as far
    return study_id, f"sqlite:///{store_dir / 'stepmark.db'}"


def _no_server(config: object) -> int:
    pytest.fail(f"the annotator would have started over {config}")


def _made(folder: Path) -> list[str]:
    """Everything below `folder` (a refused command makes nothing: no `s3:` folder, no data folder)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, captured
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert not _made(Path.cwd()), _made(Path.cwd())
    return lines[0]


def _data_argvs(study_id: str) -> list[list[str]]:
    """One valid command line of every command that takes --data (all but the bucket ones' own paths)."""
    return [
        ["record", "--study", study_id, "--env", "maze", "--episodes", "1", "--seed", "3", "--no-progress"],
        ["annotate", "--port", "0"],
        ["study", "list"],
        ["study", "show", study_id],
        ["study", "disable", study_id],
        ["import-ui", "--study", "from a bucket", "s3://bars/converted"],
        ["export", "--study", study_id, "--format", "parquet", "--out", "s3://bars/exports/x"],
        ["queue", "show", "--study", study_id],
        ["agreement", "--study", study_id],
        ["adjudicate", "--episode", "e", "--step", "0"],
        ["report", "--study", study_id, "--out", "report.html"],
        ["fields", "show", "--study", study_id],
        ["evaluate", "--study", study_id, "--predictions", "s3://bars/predictions.jsonl"],
        ["suggest", "--study", study_id, "--backend", "http://127.0.0.1:9/v1"],
    ]


@pytest.mark.parametrize("index", range(14))
def test_every_command_refuses_a_bucket_as_its_data_folder(study, capsys, index) -> None:
    study_id, store = study
    argv = _data_argvs(study_id)[index]
    line = _refused(capsys, [*argv, "--data", URL, "--store", store, "--user", "lead@example.com"])
    command = argv[0]
    assert line == (
        f"stepmark {command}: error: --data {URL}: a folder in a bucket or at a URL is not supported by "
        f"`{command}` yet; use a local folder"
    )


@pytest.mark.parametrize("url", ["gs://bars/episodes", "az://bars/episodes", "https://host/episodes",
                                 "hdfs://namenode/episodes", "minio+s3://bars/episodes"])  # fmt: skip
def test_record_refuses_any_scheme(study, capsys, url) -> None:
    study_id, store = study
    line = _refused(capsys, ["record", "--data", url, "--store", store, "--study", study_id, "--env", "maze",
                             "--no-progress"])  # fmt: skip
    assert line.startswith(f"stepmark record: error: --data {url}: a folder in a bucket") and "use a local" in line


def test_the_data_folder_from_the_environment_is_named_as_such(study, capsys, monkeypatch) -> None:
    study_id, store = study
    monkeypatch.setenv("STEPMARK_DATA", URL)
    line = _refused(capsys, ["record", "--store", store, "--study", study_id, "--env", "maze", "--no-progress"])
    assert line.startswith(f"stepmark record: error: STEPMARK_DATA {URL}: a folder in a bucket")


def test_local_files_of_store_commands_refuse_urls(study, capsys, tmp_path) -> None:
    study_id, store = study
    data = tmp_path / "data"
    common = ["--data", str(data), "--store", store, "--user", "lead@example.com"]
    cases = {
        ("study", "create", "s3://bars/study.yaml"): "SPEC s3://bars/study.yaml: a file in a bucket or at a URL "
        "is not supported by `study create` yet; use a local file",
        ("study", "fields", "--study", study_id, "gs://bars/fields.yaml"): "FILE gs://bars/fields.yaml: a file "
        "in a bucket or at a URL is not supported by `study fields` yet; use a local file",
        ("fields", "import", "--study", study_id, "s3://bars/values.jsonl"): "FILE s3://bars/values.jsonl: a "
        "file in a bucket or at a URL is not supported by `fields import` yet; use a local file",
        ("annotate", "--login-config", "https://idp/login.toml"): "--login-config https://idp/login.toml: a file "
        "in a bucket or at a URL is not supported by `annotate` yet; use a local file",
    }
    for argv, message in cases.items():
        line = _refused(capsys, [*argv, *common])
        assert line == f"stepmark {argv[0]}: error: {message}"
    assert not data.exists()  # annotate refused its --login-config before making its data folder


def test_the_recording_lands_where_file_urls_point(study, capsys, tmp_path) -> None:
    """`file://` is a local path, not a folder named `file:`."""
    study_id, store = study
    data = tmp_path / "recorded"
    argv = ["record", "--data", f"file://{data}", "--store", store, "--study", study_id, "--env", "maze",
            "--seed", "1", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    assert f"files under {data}" in capsys.readouterr().out
    assert not _made(Path.cwd()) and any(p.is_dir() for p in data.iterdir())


def test_the_annotators_settings_refuse_urls(study, monkeypatch) -> None:
    from annotator.web import context

    monkeypatch.setattr(sys, "argv", ["app.py", "--data", URL])
    with pytest.raises(StepmarkError, match=r"^--data s3://bars/episodes: a folder in a bucket"):
        context.settings()
    monkeypatch.setattr(sys, "argv", ["app.py"])
    monkeypatch.setenv("STEPMARK_LOGIN_CONFIG", "gs://bars/login.toml")
    with pytest.raises(StepmarkError, match=r"^--login-config gs://bars/login.toml: a file in a bucket"):
        context.settings()
    assert not _made(Path.cwd())


@pytest.mark.parametrize("module", ["pipelines.export", "pipelines.suggest"])
def test_module_entry_points_refuse_a_bucket_data_folder(study, module) -> None:
    study_id, store = study
    argv = ["--data", URL, "--store", store, "--study", study_id]
    argv += ["--out", "s3://bars/x"] if module == "pipelines.export" else ["--backend", "http://127.0.0.1:9/v1"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    code = (f"import sys; from {module} import run\nfrom pipelines.errors import StepmarkError\n"
            f"try: run(sys.argv[1:])\nexcept StepmarkError as e: print(e, file=sys.stderr); sys.exit(2)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"--data {URL}: a folder in a bucket"), done.stderr
    assert not _made(Path.cwd())


def test_local_path_keeps_local_paths_and_refuses_schemes() -> None:
    assert storage.local_path("./stepmark-data", "--data", "record") == Path("stepmark-data")
    assert storage.local_path("s3:bars", "--data", "record") == Path("s3:bars")  # no `://`: a local name
    assert storage.local_path("file:///srv/data", "--data", "record") == Path("/srv/data")
    for url in ("s3://b", "GS://b/x", "az://c/x", "http://h/x", "hdfs://n/x", "s3a://b/x"):
        with pytest.raises(StepmarkError, match="use a local folder"):
            storage.local_path(url, "--data", "record")
