"""AppTest of the Export page: choose episodes and options, run the export pipeline, download the result;
the exported envlogger dataset is read back with envlogger's own reader."""

from __future__ import annotations

import zipfile

import pytest
from streamlit.testing.v1 import AppTest

from annotator.operations import ExportOptions, Operations, ref_key, ref_of
from annotator.plain import md_unescape
from protos.rlds_creator import client_pb2
from tests.annotator.annotator_data import ALICE, build_env_data

APP = "../../annotator/app.py"


@pytest.fixture(scope="module")
def env_data(tmp_path_factory):
    data = build_env_data(tmp_path_factory.mktemp("app_export"), episodes=2, max_steps=12)
    data.repo.add_step_tag(ref_of(data.episodes[0]), 5, "goal", ALICE)
    return data


def export_page(env_data, monkeypatch) -> AppTest:
    monkeypatch.setenv("STEPMARK_DATA", str(env_data.data_dir))
    monkeypatch.setenv("STEPMARK_USER", ALICE)
    at = AppTest.from_file(APP, default_timeout=300).run()
    at.switch_page("views/export.py")
    return at.run()


def test_export_as_zip_with_end_of_episode_tag_and_download(env_data, monkeypatch):
    at = export_page(env_data, monkeypatch)
    keys = [ref_key(ref_of(e)) for e in env_data.episodes]
    assert at.button(key="export_run").disabled
    at.multiselect(key="export_pick").set_value(keys).run()
    assert "goal" in at.multiselect(key="export_end_tags").options
    at.multiselect(key="export_end_tags").set_value(["goal"])
    at.checkbox(key="export_strip").check()
    at.button(key="export_run").click().run()
    assert not at.exception, at.exception
    assert not at.error, at.error[0].value
    assert at.get("progress")[0].proto.value == 100
    assert "Exported 2 episode(s)" in [t.value for t in at.toast]
    ready = md_unescape(at.success[0].value)
    assert ready.startswith("Export ready:") and ".zip" in ready
    assert at.get("download_button"), "a download button for the ZIP"
    zip_path = ready.removeprefix("Export ready: ")
    with zipfile.ZipFile(zip_path) as archive:
        names = archive.namelist()
    assert any(n.endswith("metadata.riegeli") for n in names)


def test_export_folder_reads_back_with_envlogger(env_data, tmp_path):
    import envlogger

    ops = Operations(env_data.repo, env_data.data_dir, ALICE, export_dir=tmp_path)
    fractions: list[float] = []
    request = client_pb2.DownloadEpisodesRequest(refs=[ref_of(e) for e in env_data.episodes], archive=False,
                                                 end_of_episode_tags=["goal"])  # fmt: skip
    response = ops.download_episodes(request, ExportOptions(format="envlogger"), progress=fractions.append)
    assert response.progress == 100 and response.url.startswith("file://")
    assert fractions and fractions[-1] == 1.0 and all(0 <= f <= 1 for f in fractions)
    out = response.url.removeprefix("file://")
    with envlogger.Reader(out) as reader:
        lengths = sorted(len(list(episode)) for episode in reader.episodes)
    # envlogger records: episode 0 cut at its tagged step 5 (records 0..5); episode 1 whole (reset + 12)
    assert lengths == [6, env_data.episodes[1].num_steps + 1]


def test_export_without_episodes_is_refused(env_data):
    ops = Operations(env_data.repo, env_data.data_dir, ALICE)
    response = ops.handle(client_pb2.OperationRequest(download_episodes=client_pb2.DownloadEpisodesRequest()))
    assert response.error.mesg == "download_episodes: choose at least one episode to export"


@pytest.mark.tfds
def test_export_page_writes_a_tfds_folder(env_data, monkeypatch):
    import sys

    loaded_before = "tensorflow" in sys.modules  # by an earlier test of this process
    at = export_page(env_data, monkeypatch)
    at.multiselect(key="export_pick").set_value([ref_key(ref_of(e)) for e in env_data.episodes]).run()
    at.radio(key="export_format").set_value("tfds")
    at.radio(key="export_archive").set_value("folder")
    at.button(key="export_run").click().run()
    assert not at.exception and not at.error, (at.exception, at.error)
    folder = md_unescape(at.success[0].value).removeprefix("Export ready: ")
    # The export ran in a child process: TensorFlow never entered the annotator's (it crashes beside OSMesa).
    assert loaded_before or "tensorflow" not in sys.modules
    import tensorflow_datasets as tfds

    dataset = tfds.builder_from_directory(folder).as_dataset(split="train")
    assert sum(1 for _ in dataset) == len(env_data.episodes)
    assert at.get("download_button"), "the folder is offered zipped"


def test_export_says_what_it_left_out_and_never_offers_a_stale_result(env_data, monkeypatch):
    """Found in the browser: an episode left out of the export (here: not completed) was not mentioned, and the
    download of the previous export stayed on screen for a different selection (even while exporting it)."""
    at = export_page(env_data, monkeypatch)
    first, second = (ref_key(ref_of(e)) for e in env_data.episodes)
    ref = ref_of(env_data.episodes[1])
    env_data.repo.set_episode_state(ref, 3, ALICE)  # cancelled: left out unless asked for
    try:
        at.multiselect(key="export_pick").set_value([first, second]).run()
        at.button(key="export_run").click().run()
        assert not at.exception and not at.error, (at.exception, at.error)
        assert "Exported 1 episode(s), 1 left out" in [t.value for t in at.toast]
        warnings = [md_unescape(w.value) for w in at.warning]
        assert any(w.startswith(f"Left out {second}") and "state" in w for w in warnings), warnings
        assert at.get("download_button")

        at.multiselect(key="export_pick").set_value([first]).run()  # another selection: no stale download
        assert not at.get("download_button")
        assert any("export again" in md_unescape(c.value) for c in at.caption)
        at.multiselect(key="export_pick").set_value([first, second]).run()  # back: that result fits again
        assert at.get("download_button")
    finally:
        env_data.repo.set_episode_state(ref, 1, ALICE)


def test_a_mixed_selection_is_split_into_one_dataset_per_environment(env_data, monkeypatch, fixtures_dir):
    """The page offered no way around 'cannot share one dataset' (the error named a command-line flag)."""
    from tests.annotator.annotator_data import import_ui_fixtures

    study = import_ui_fixtures(env_data.data_dir, fixtures_dir)
    ui_episode = env_data.repo.list_episodes(study_id=study.id)[0]
    at = export_page(env_data, monkeypatch)
    chosen = [ref_key(ref_of(env_data.episodes[0])), ref_key(ref_of(ui_episode))]
    at.multiselect(key="export_pick").set_value(chosen).run()
    assert at.checkbox(key="export_split").value is True
    at.button(key="export_run").click().run()
    assert not at.exception and not at.error, (at.exception, at.error)
    captions = [md_unescape(c.value) for c in at.caption]
    assert any("episode(s) of coinrun" in c for c in captions), captions
    assert any("of ui" in c or "android" in c for c in captions), captions

    at.checkbox(key="export_split").uncheck().run()
    at.button(key="export_run").click().run()
    assert "cannot share one dataset" in at.error[0].value


def test_the_page_offers_every_export_format():
    """A format the command line writes but the page leaves out is a format annotators cannot reach."""
    from annotator.views.export import FORMAT_LABELS
    from pipelines.export import FORMATS

    assert list(FORMAT_LABELS) == list(FORMATS)


def test_export_page_writes_parquet_split_by_episode(env_data, monkeypatch):
    import pyarrow.parquet as pq

    at = export_page(env_data, monkeypatch)
    at.multiselect(key="export_pick").set_value([ref_key(ref_of(e)) for e in env_data.episodes]).run()
    at.radio(key="export_format").set_value("parquet")
    at.radio(key="export_archive").set_value("folder")
    at.text_input(key="export_splits").set_value("train=0.5,test=0.5")
    at.number_input(key="export_split_seed").set_value(3)
    at.button(key="export_run").click().run()
    assert not at.exception and not at.error, (at.exception, at.error)
    folder = md_unescape(at.success[0].value).removeprefix("Export ready: ")
    table = pq.read_table(f"{folder}/data")
    ids = {str(e.id) for e in env_data.episodes}
    assert set(table.column("episode_id").to_pylist()) == ids
    per_episode = dict(zip(table.column("episode_id").to_pylist(), table.column("split").to_pylist(), strict=True))
    assert set(per_episode.values()) <= {"train", "test"}
    assert table.num_rows == sum(e.num_steps + 1 for e in env_data.episodes)


def test_export_page_names_a_bad_split(env_data, monkeypatch):
    at = export_page(env_data, monkeypatch)
    at.multiselect(key="export_pick").set_value([ref_key(ref_of(env_data.episodes[0]))]).run()
    at.text_input(key="export_splits").set_value("train=0.8,val=0.8")
    at.button(key="export_run").click().run()
    assert not at.exception, at.exception
    assert at.error and "split" in at.error[0].value.lower(), [e.value for e in at.error]
    assert not at.get("download_button")


def test_export_page_writes_a_minari_dataset_minari_loads(env_data, monkeypatch):
    import minari

    at = export_page(env_data, monkeypatch)
    at.multiselect(key="export_pick").set_value([ref_key(ref_of(e)) for e in env_data.episodes]).run()
    at.radio(key="export_format").set_value("minari")
    at.radio(key="export_archive").set_value("folder")
    at.button(key="export_run").click().run()
    assert not at.exception and not at.error, (at.exception, at.error)
    folder = md_unescape(at.success[0].value).removeprefix("Export ready: ")
    dataset = minari.MinariDataset(f"{folder}/data")
    assert dataset.total_episodes == len(env_data.episodes)
    assert sorted(len(e.actions) for e in dataset.iterate_episodes()) == sorted(
        e.num_steps for e in env_data.episodes
    )
