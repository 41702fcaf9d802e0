"""Export to envlogger (Riegeli) on real recorded episodes, read back with envlogger.Reader and compared with
the store: counts, rewards, tags, truncation points, statistics; selection rules, options, atomicity."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from pipelines import export
from pipelines.episodes import open_episode
from pipelines.errors import StepmarkError
from pipelines.exporters import archive
from pipelines.exporters.selection import MixedSpecs
from pipelines.store import open_store
from protos.rlds_creator import study_pb2
from tests.pipelines.export import readback
from tests.pipelines.export.export_data import NETHACK_ENV, PROCGEN_ENV, ExportData, copy_data


def request(data: ExportData, out: Path, **kw) -> export.ExportRequest:
    return export.ExportRequest(data_dir=str(data.data_dir), out=str(out), **kw)


def by_id(data: ExportData) -> dict[str, study_pb2.Episode]:
    return {e.id: e for e in [*data.procgen, *data.nethack, *data.ui]}


def store_rewards(data: ExportData, episode: study_pb2.Episode) -> list[float]:
    with open_episode(episode, data.data_dir) as reader:
        return [s.reward for s in reader]


def leftovers(parent: Path, name: str) -> list[Path]:
    return [p for p in parent.iterdir() if p.name.startswith(name)]


def test_mixed_environments_are_refused_with_the_groups(export_data: ExportData, tmp_path: Path) -> None:
    out = tmp_path / "mixed"
    with pytest.raises(MixedSpecs) as err:
        export.export_episodes(request(export_data, out, study_id=export_data.study_id))
    message = str(err.value)
    assert f"{PROCGEN_ENV}: 2 episode(s)" in message and f"{NETHACK_ENV}: 2 episode(s)" in message
    assert "--split-by-spec" in message
    assert leftovers(tmp_path, "mixed") == []


def test_split_by_spec_round_trip_matches_the_store(export_data: ExportData, tmp_path: Path) -> None:
    out = tmp_path / "split"
    progress: list[float] = []
    summary = export.export_episodes(
        request(
            export_data, out, study_id=export_data.study_id, split_by_spec=True, end_of_episode_tags=["goal"]
        ),
        progress.append,
    )
    assert progress[0] == 0.0 and progress[-1] == 100.0 and progress == sorted(progress)
    assert {d.name for d in summary.datasets} == {PROCGEN_ENV, NETHACK_ENV}
    assert summary.episodes == 4 and not summary.dead_letters
    assert sorted(p.name for p in out.iterdir()) == sorted([NETHACK_ENV, PROCGEN_ENV, export.SUMMARY_FILE])
    episodes = by_id(export_data)
    total_steps = 0
    for dataset in summary.datasets:
        read = readback.read_envlogger(out / dataset.name)
        # Rejected and invalid-session episodes are left out: exactly the two valid COMPLETED ones per env.
        expected = export_data.procgen if dataset.name == PROCGEN_ENV else export_data.nethack
        assert [e["metadata"]["episode_id"] for e in read] == [e.id for e in expected]
        for e in read:
            meta, records = e["metadata"], e["records"]
            stored = episodes[meta["episode_id"]]
            rewards = store_rewards(export_data, stored)
            cut = 5 if stored.id == export_data.procgen[0].id else None
            n = (cut + 1) if cut is not None else stored.num_steps + 1
            assert len(records) == n
            total_steps += n
            # Record t holds the reward of the transition into it (RLDS step t-1's reward).
            assert [r["reward"] for r in records[1:]] == pytest.approx(rewards[: n - 1])
            assert records[0]["step_type"] == 0 and records[-1]["step_type"] == 2
            assert all(r["step_type"] == 1 for r in records[1:-1])
            # Statistics: episode metadata and info["episode"] on the finished (LAST) record only.
            assert meta["episode_length"] == meta["num_steps"] == n - 1
            assert meta["episode_return"] == pytest.approx(sum(rewards[: n - 1]))
            assert meta["episode_success"] is bool(stored.metadata["success"]) or cut is not None
            assert records[-1]["custom_data"]["keys"] == [] and meta["tags"] == list(meta["tags"])
            masks = [r["custom_data"]["info"]["episode"]["mask"] for r in records]
            assert masks == [False] * (n - 1) + [True]
            last_entry = records[-1]["custom_data"]["info"]["episode"]
            assert last_entry["l"] == n - 1 and last_entry["r"] == pytest.approx(meta["episode_return"])
            # Step tags: every label of the selection is a boolean on every record.
            for t, r in enumerate(records):
                labels = (
                    {tag.label for tag in stored.step_metadata[t].tags}
                    if t in stored.step_metadata
                    else set()
                )
                assert {k: v for k, v in r["custom_data"].items() if k.startswith("tag:")} == {
                    f"tag:{x}": x in labels for x in ("door", "goal", "jump")
                }
            if cut is not None:
                assert meta["truncated_by_tag"] == "goal"
                assert records[-1]["discount"] == 1.0  # dm_env: a truncation, not a termination
                assert records[-1]["custom_data"]["tag:goal"]
                assert meta["tags"] == ["good run"] and meta["notes"] == "reached the ledge"
    assert summary.steps == total_steps
    assert json.loads((out / export.SUMMARY_FILE).read_text())["episodes"] == 4


def test_observations_and_actions_survive_unchanged(export_data: ExportData, tmp_path: Path) -> None:
    out = tmp_path / "nh"
    episode = export_data.nethack[1]
    export.export_episodes(request(export_data, out, refs=[export_data.ref(episode)]))
    (read,) = readback.read_envlogger(out)
    with open_episode(episode, export_data.data_dir) as reader:
        steps = list(reader)
    for t, record in enumerate(read["records"]):
        assert set(record["observation"]) == set(steps[t].observation)
        for key, value in steps[t].observation.items():
            assert (record["observation"][key] == value).all(), key
        if t:
            assert record["action"] == steps[t - 1].action
        # Record t carries step t's metadata: the keys and info of step t's own action (none on the last).
        last = t == len(read["records"]) - 1
        info = json.loads(record["custom_data"]["info"]["json"])
        expected = {} if last else dict(steps[t].info)
        expected.pop("episode", None)  # one home for the statistics: custom_data["info"]["episode"]
        assert info == expected
        assert record["custom_data"]["keys"] == ([] if last else steps[t].keys)


def test_selection_by_refs_tag_state_and_the_include_flags(export_data: ExportData, tmp_path: Path) -> None:
    refs = [export_data.ref(export_data.procgen[1]), export_data.rejected, export_data.invalid_session]
    summary = export.export_episodes(request(export_data, tmp_path / "refs", refs=refs))
    assert summary.episodes == 1
    reasons = {s["reason"] for s in summary.skipped}
    assert reasons == {"state STATE_REJECTED (not selected)", "session marked invalid"}
    summary = export.export_episodes(
        request(
            export_data, tmp_path / "all", refs=refs, include_incomplete=True, include_invalid_sessions=True
        )
    )
    assert summary.episodes == 3 and not summary.skipped
    # By tag (a step tag) within the study: the two Procgen episodes tagged "jump".
    summary = export.export_episodes(
        request(export_data, tmp_path / "tag", study_id=export_data.study_id, tag="jump")
    )
    ids = [e["metadata"]["episode_id"] for e in readback.read_envlogger(tmp_path / "tag")]
    assert ids == [export_data.procgen[0].id, export_data.procgen[1].id]
    # By state: only the rejected one.
    summary = export.export_episodes(request(export_data, tmp_path / "rej", state="rejected"))
    assert [e["metadata"]["episode_id"] for e in readback.read_envlogger(tmp_path / "rej")] == [
        export_data.rejected.episode_id
    ]
    assert readback.read_envlogger(tmp_path / "rej")[0]["metadata"]["state"] == "STATE_REJECTED"


def test_strip_internal_metadata_leaves_fixed_fields(export_data: ExportData, tmp_path: Path) -> None:
    out = tmp_path / "strip"
    export.export_episodes(
        request(
            export_data,
            out,
            refs=[export_data.ref(e) for e in export_data.procgen],
            strip_internal_metadata=True,
        )
    )
    read = readback.read_envlogger(out)
    keys = {frozenset(r["custom_data"]) for e in read for r in e["records"]}
    assert keys == {frozenset({"info", "tag:goal", "tag:jump"})}
    assert {frozenset(r["custom_data"]["info"]) for e in read for r in e["records"]} == {frozenset({"episode"})}
    for e in read:
        assert "tags" not in e["metadata"] and "notes" not in e["metadata"]
        assert e["metadata"]["episode_id"] and e["metadata"]["episode_length"] >= 1


def test_archive_is_one_zip_that_extracts_safely(export_data: ExportData, tmp_path: Path) -> None:
    out = tmp_path / "data.zip"
    summary = export.export_episodes(
        request(export_data, out, refs=[export_data.ref(e) for e in export_data.nethack], archive=True)
    )
    assert out.is_file() and summary.bytes == out.stat().st_size and summary.archive
    assert leftovers(tmp_path, "data.zip") == [out]
    dest = archive.safe_extract(out, tmp_path / "extracted")
    read = readback.read_envlogger(dest)
    assert [e["metadata"]["episode_id"] for e in read] == [e.id for e in export_data.nethack]


def test_unreadable_episode_is_a_dead_letter_and_the_rest_is_exported(
    export_data: ExportData, tmp_path: Path
) -> None:
    data_dir = copy_data(export_data, tmp_path / "data")
    broken = export_data.procgen[1]
    tag_dir = data_dir / broken.storage.environment_logger.tag_directory
    shutil.rmtree(tag_dir)
    out = tmp_path / "out"
    summary = export.export_episodes(
        export.ExportRequest(
            data_dir=str(data_dir), out=str(out), refs=[export_data.ref(e) for e in export_data.procgen]
        )
    )
    assert summary.episodes == 1
    assert summary.counters["episodes"] == 1 and summary.counters["dead_letters.unreadable"] == 1
    (letter,) = summary.dead_letters
    assert (
        letter.episode.endswith(broken.id) and letter.reason == "unreadable" and "not found" in letter.error
    )
    lines = (out / export.DEAD_LETTERS_FILE).read_text().splitlines()
    assert json.loads(lines[0])["episode"] == letter.episode
    assert [e["metadata"]["episode_id"] for e in readback.read_envlogger(out)] == [export_data.procgen[0].id]


def test_store_disagreeing_with_the_data_is_a_dead_letter(export_data: ExportData, tmp_path: Path) -> None:
    from pipelines.store.database import create_engine

    data_dir = copy_data(export_data, tmp_path / "data")
    target = export_data.nethack[1]
    # The store claims 999 steps for an episode whose files hold 13: never exported with wrong figures.
    engine = create_engine(None, data_dir)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE episodes SET num_steps = 999 WHERE id = ?", (target.id,))
    engine.dispose()
    out = tmp_path / "out"
    summary = export.export_episodes(
        export.ExportRequest(
            data_dir=str(data_dir), out=str(out), refs=[export_data.ref(e) for e in export_data.nethack]
        )
    )
    (letter,) = summary.dead_letters
    assert letter.reason == "inconsistent" and target.id in letter.error and "999" in letter.error
    assert summary.episodes == 1


def test_failed_export_leaves_nothing_behind(export_data: ExportData, tmp_path: Path, monkeypatch) -> None:
    from pipelines.exporters import envlogger_writer

    def boom(*args, **kwargs):
        raise OSError("disk full (injected)")

    monkeypatch.setattr(envlogger_writer, "write_dataset_metadata", boom)
    out = tmp_path / "fails"
    with pytest.raises(OSError, match="injected"):
        export.export_episodes(request(export_data, out, refs=[export_data.ref(export_data.nethack[0])]))
    assert leftovers(tmp_path, "fails") == []


def test_existing_output_is_never_overwritten(export_data: ExportData, tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(StepmarkError, match="already exists"):
        export.export_episodes(request(export_data, out, study_id=export_data.study_id))
    assert (out / "keep.txt").read_text() == "mine"


def test_exported_envlogger_dataset_matches_the_schema(export_data: ExportData, tmp_path: Path) -> None:
    spec = readback.schema()
    jsonschema.Draft202012Validator.check_schema(spec)
    for name, kw in {
        "full": {},
        "strip": {"strip_internal_metadata": True},
        "cut": {"end_of_episode_tags": ["goal"]},
    }.items():
        out = tmp_path / name
        export.export_episodes(
            request(export_data, out, refs=[export_data.ref(e) for e in export_data.procgen], **kw)
        )
        jsonschema.validate(readback.envlogger_instance(out), spec)
    # The schema is strict: an undocumented field is refused.
    instance = readback.envlogger_instance(tmp_path / "full")
    instance["episodes"][0]["records"][0]["custom_data"]["surprise"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(instance, spec)


def test_ui_episodes_export_to_envlogger(export_data: ExportData, tmp_path: Path) -> None:
    if not export_data.ui:
        pytest.fail("UI fixtures were not converted (pipelines.convert / pipelines.ui_import missing)")
    out = tmp_path / "ui"
    summary = export.export_episodes(
        request(export_data, out, study_id=export_data.ui_study_id, end_of_episode_tags=["done"])
    )
    # The one-screen Rico traces have no recorded action: no transition, left out and listed.
    one_screen = [e for e in export_data.ui if e.num_steps == 1]
    assert summary.episodes == len(export_data.ui) - len(one_screen) and not summary.dead_letters
    assert sorted(s["episode"] for s in summary.skipped) == sorted(export.episode_name(e) for e in one_screen)
    read = {e["metadata"]["episode_id"]: e for e in readback.read_envlogger(out)}
    multi = read[export_data.ui[0].id]
    assert len(multi["records"]) == 5 and multi["metadata"]["truncated_by_tag"] == "done"
    assert multi["metadata"]["environment_id"] == "android-ui"
    assert multi["metadata"]["kind"] == "ui" and multi["metadata"]["app_package"]
    assert [r["custom_data"]["tag:login"] for r in multi["records"]] == [False, True, False, False, False]
    obs = multi["records"][1]["observation"]
    assert obs["screenshot"][:2] in (b"\xff\xd8", b"\x89P") and len(obs["objects"]["bbox"][0]) == 4
    action = multi["records"][1]["action"]  # the action taken on screen 0
    assert action["type_name"] != "" and set(action) >= {"x", "y", "target_index", "text"}
    with open_store(None, export_data.data_dir) as repo:
        stored = repo.get_episode(export_data.ref(export_data.ui[0]))
    assert multi["metadata"]["episode_length"] == 4 and stored.num_steps > 5  # transitions, like env episodes
    # Uncut, the last screen's recorded action leads to an empty placeholder screen (kept, not dropped).
    uncut = tmp_path / "uncut"
    export.export_episodes(request(export_data, uncut, study_id=export_data.ui_study_id))
    read = {e["metadata"]["episode_id"]: e for e in readback.read_envlogger(uncut)}
    for stored_ui in export_data.ui[:1]:
        records = read[stored_ui.id]["records"]
        assert records[0]["step_type"] == 0 and records[-1]["step_type"] == 2 and len(records) >= 2
        assert read[stored_ui.id]["metadata"]["episode_length"] == len(records) - 1
        assert records[-1]["custom_data"]["info"]["episode"]["mask"] and records[-1]["discount"] == 1.0
        if len(records) == stored_ui.num_steps + 1:  # the placeholder: no screenshot, no objects
            final = records[-1]["observation"]
            assert final["screenshot"] == b"" and final["objects"]["id"] == [] and final["screen_width"] == 0
            assert records[-1]["action"]["type_name"] != "ACTION_UNSPECIFIED"
    assert read[export_data.ui[0].id]["metadata"]["tags"] == []
    jsonschema.validate(readback.envlogger_instance(out), readback.schema())


def test_ui_and_env_episodes_never_share_a_dataset(export_data: ExportData, tmp_path: Path) -> None:
    refs = [export_data.ref(export_data.procgen[0]), export_data.ref(export_data.ui[0])]
    with pytest.raises(MixedSpecs, match="UI episodes"):
        export.export_episodes(request(export_data, tmp_path / "x", refs=refs))
    summary = export.export_episodes(request(export_data, tmp_path / "y", refs=refs, split_by_spec=True))
    assert sorted(d.name for d in summary.datasets) == [PROCGEN_ENV, "ui"]


def test_download_request_from_the_protocol(export_data: ExportData, tmp_path: Path) -> None:
    from protos.rlds_creator import client_pb2

    proto = client_pb2.DownloadEpisodesRequest(
        refs=[export_data.ref(e) for e in export_data.procgen],
        archive=True,
        strip_internal_metadata=True,
        end_of_episode_tags=["goal"],
    )
    req = export.ExportRequest.from_download_request(
        proto, data_dir=export_data.data_dir, out=tmp_path / "dl.zip", include_incomplete=False
    )
    assert (req.archive, req.strip_internal_metadata, req.end_of_episode_tags) == (True, True, ["goal"])
    progress: list[float] = []
    summary = export.export_episodes(req, progress.append)
    assert progress[-1] == 100.0 and summary.episodes == 2 and summary.out == str(tmp_path / "dl.zip")
    read = readback.read_envlogger(archive.safe_extract(tmp_path / "dl.zip", tmp_path / "x"))
    assert [len(e["records"]) for e in read] == [6, export_data.procgen[1].num_steps + 1]
    assert all("notes" not in e["metadata"] for e in read)


def test_study_selection_leaves_out_incomplete_and_invalid_unless_asked(
    export_data: ExportData, tmp_path: Path
) -> None:
    def procgen_ids(**kw) -> list[str]:
        out = tmp_path / f"s{len(list(tmp_path.iterdir()))}"
        export.export_episodes(
            request(export_data, out, study_id=export_data.study_id, split_by_spec=True, **kw)
        )
        return [e["metadata"]["episode_id"] for e in readback.read_envlogger(out / PROCGEN_ENV)]

    valid = [e.id for e in export_data.procgen]
    assert procgen_ids() == valid
    assert procgen_ids(include_incomplete=True) == [*valid, export_data.rejected.episode_id]
    assert procgen_ids(include_invalid_sessions=True) == [*valid, export_data.invalid_session.episode_id]


def test_pickle_stored_episodes_export_like_envlogger_ones(export_data: ExportData, tmp_path: Path) -> None:
    from annotator.recorder import record_batch

    data_dir = copy_data(export_data, tmp_path / "data")
    with open_store(None, data_dir) as repo:
        (episode,) = record_batch(repo, data_dir, export_data.study_id, PROCGEN_ENV, 1, "random",
                                  user="carol@example.com", seed=21, progress=False, storage="pickle")  # fmt: skip
        repo.add_step_tag(repo.ref(episode), 1, "jump", "carol@example.com")
    assert episode.storage.WhichOneof("type") == "pickle"
    out = tmp_path / "out"
    refs = [export_data.ref(export_data.procgen[1]), export_data.ref(episode)]
    summary = export.export_episodes(export.ExportRequest(data_dir=str(data_dir), out=str(out), refs=refs))
    assert summary.episodes == 2 and not summary.dead_letters
    _, read = readback.read_envlogger(out)
    assert read["metadata"]["episode_id"] == episode.id and len(read["records"]) == episode.num_steps + 1
    assert [r["custom_data"]["tag:jump"] for r in read["records"][:3]] == [False, True, False]
    assert read["records"][-1]["custom_data"]["info"]["episode"]["l"] == episode.num_steps


def test_export_serializer_reads_back_like_envlogger_codec(export_data: ExportData) -> None:
    """The exporter's record bytes decode (with envlogger's own codec) to what the codec itself would have
    written, on real records of both environments and UI episodes — except that empty lists and dicts stay
    empty (the codec's own encoding reads them back as None) and dicts come back in sorted key order."""
    from envlogger.converters import codec

    from pipelines.exporters import envlogger_writer
    from pipelines.exporters.transform import TransformOptions, transform_episode

    for episode in [export_data.procgen[0], export_data.nethack[0], export_data.ui[0]]:
        with open_episode(episode, export_data.data_dir) as reader:
            steps, meta = list(reader), reader.metadata
        exported = transform_episode(0, episode, steps, TransformOptions(step_tag_labels=("jump",)), meta)
        for record in envlogger_writer.episode_records(exported):
            ours = codec.decode(envlogger_writer.encode(tuple(record)))
            theirs = codec.decode(codec.encode(record))
            assert _same(ours, theirs), episode.id
        decoded = codec.decode(envlogger_writer.encode(exported.meta.to_dict()))
        assert decoded["tags"] == list(exported.meta.tags)  # [] stays [] (the codec would give None)


def _same(ours, theirs) -> bool:  # type: ignore[no-untyped-def]
    if isinstance(ours, dict):
        return isinstance(theirs, dict) and set(ours) == set(theirs) and all(_same(ours[k], theirs[k]) for k in ours)
    if isinstance(ours, list | tuple) and not isinstance(theirs, list | tuple):
        return len(ours) == 0 and theirs is None  # the codec's None for an empty list
    if isinstance(ours, list | tuple):
        return len(ours) == len(theirs) and all(_same(a, b) for a, b in zip(ours, theirs, strict=True))
    if isinstance(ours, np.ndarray) or isinstance(theirs, np.ndarray):
        return np.array_equal(np.asarray(ours), np.asarray(theirs))
    return ours == theirs


def test_serializer_memos_keep_equal_looking_values_apart() -> None:
    """Step records repeat the same small dicts and flags, which the serializer memoizes: values that compare
    equal but differ in type or sign (True, 1, 1.0, int64, bool_, -0.0) still read back as themselves, first
    time and from the memo, as the codec's own encoding reads back."""
    from envlogger.converters import codec

    from pipelines.exporters import envlogger_writer

    leaves = [True, 1, 1.0, np.int64(1), np.bool_(True), -0.0, 0.0, False, 0, "x", ""]
    values = [*leaves, *([v] for v in leaves), *((v,) for v in leaves), *({"a": v} for v in leaves), [], ()]
    for _ in range(2):  # the second round reads the memos
        for value in values:
            record = {"info": {"episode": value}, "keys": value}
            ours = codec.decode(envlogger_writer.encode(record))
            theirs = codec.decode(codec.encode(record))
            assert _same(ours, theirs) and _types(ours) == _types(theirs), value
        assert codec.decode(envlogger_writer.encode({"info": {}})) == {"info": {}}  # the codec: None


def _types(value):  # type: ignore[no-untyped-def]
    """The leaf types and float signs of a decoded value (empty containers: the codec's None aside)."""
    if isinstance(value, dict):
        return {k: _types(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_types(v) for v in value] or None
    if value is None:
        return None
    sign = np.signbit(value) if isinstance(value, float | np.floating) else None
    return type(value), sign
