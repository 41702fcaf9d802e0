"""`stepmark export`: selected episodes -> one training-ready envlogger or TFDS/RLDS dataset (Apache Beam).

Shape of the job (Beam wiring only; the work lives in `pipelines/exporters/`):
1. plan (driver): read the selection from the store a batch at a time (a study may hold a million episodes)
   and stream each episode, with its index in its dataset, split, grounding annotations and field values, into
   its dataset's work file in the staging folder (`exporters/work_file.py`), keeping only counts per spec
   group and the step tag labels; refuse mixed specs unless `--split-by-spec`; derive each dataset's
   features/specs from its first readable episode;
2. per episode (any worker, independent; the pipeline starts from chunk references of the work files, which
   workers read from storage): read the steps, transform them (truncation, tag fields,
   stripping, statistics) and write one Riegeli shard (envlogger) or one serialized example (TFDS);
   episodes that fail become dead letters with a reason, never silently dropped;
3. last step: envlogger `metadata.riegeli` / TFDS shards + `dataset_info.json`, then the summary, the
   optional ZIP, and one rename of the temporary folder to `--out`. A failed export removes its temporary
   folder; a killed one leaves only `<out>.tmp-<pid>-*` behind, never something at `--out`, and the next
   export into the same folder removes the temporary folders whose process is gone.
Runs on FnApiRunner by default and on any Beam runner by flags (workers must see `--data` and `--out`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from google.protobuf import json_format

from pipelines import storage
from pipelines.beam_options import check_runner, pipeline_options, spread_over_dask
from pipelines.episodes.publish import open_store
from pipelines.errors import StepmarkError
from pipelines.exporters import archive, envlogger_writer, spaces, study_fields
from pipelines.exporters.episode_fn import (
    NAMESPACE,
    DatasetJob,
    ExportDatasets,
    ExportEpisodeFn,
    count_done,
    iter_chunk_outcomes,
    open_for_export,
)
from pipelines.exporters.request import DatasetSummary, DeadLetter, ExportRequest, ExportSummary
from pipelines.exporters.selection import (
    SelectionQuery,
    Skipped,
    SpecGroup,
    SpecGroups,
    check_query,
    iter_selected,
    mixed_specs_error,
)
from pipelines.exporters.splits import SplitSpec, parse_splits, split_names
from pipelines.exporters.staging import (
    OWNER_FILE,
    SUMMARY_FILE,
    check_out,
    new_staging,
    publish_file,
    publish_folder,
    remove_stale_staging,
)
from pipelines.exporters.transform import (
    KIND_UI,
    UI_ENVIRONMENT_ID,
    ExportEpisode,
    TransformOptions,
    episode_kind,
    episode_name,
    frame_leaf,
    step_tag_labels,
    transform_episode,
)
from pipelines.exporters.ui_objects import parse_ui_objects
from pipelines.exporters.work_file import Chunk, WorkItem, WorkWriter, iter_items
from pipelines.store.access import parse_ref
from protos.rlds_creator import study_pb2

FORMATS = ("envlogger", "tfds", "parquet", "minari")
DEAD_LETTERS_FILE = "dead_letters.jsonl"
WORK_DIR = "_work"
Progress = Callable[[float], None]


def check_annotations(mode: str, user: str) -> None:
    from pipelines.exporters.grounding import MODES

    if mode not in MODES:
        raise StepmarkError(f"--annotations {mode!r}: choose one of {', '.join(MODES)}")
    if mode == "mine" and not user:
        raise StepmarkError("--annotations mine needs --user (whose annotations to apply)")


def _grounding_of(repo: Any, episodes: Sequence[Any], mode: str) -> dict[str, tuple]:
    """The grounding annotations of the UI episodes among these (one store read per batch of the selection)."""
    ui = [e for e in episodes if episode_kind(e) == KIND_UI]
    if mode == "none" or not ui:
        return {}
    from pipelines.exporters.grounding import load_annotations

    return {k: tuple(v) for k, v in load_annotations(repo, ui).items() if v}


@dataclass
class _Selected:
    """What the driver knows of the selection once it has streamed it into the work files: bounded state."""

    groups: list[SpecGroup]
    skipped: list[Skipped]
    step_tag_labels: tuple[str, ...]
    field_defs: tuple
    work_files: dict[str, str]  # dataset -> its work file
    work_key: bytes = dataclasses.field(repr=False)  # the work files' seal (work_file.py): never in a log
    chunks: list[Chunk]
    episodes: int


def _stream_selection(
    repo: Any, query: SelectionQuery, request: ExportRequest, split_spec: SplitSpec | None, folder: str
) -> _Selected:
    """One pass over the selection, a batch at a time: each episode goes with its index in its dataset, its split,
    its grounding annotations and field values into its dataset's work file (work_file.py); the driver keeps
    only the groups' counts, the step tag labels and the skipped list."""
    skipped: list[Skipped] = []
    groups = SpecGroups(repo)
    labels: set[str] = set()
    fields = study_fields.StudyFields(repo, request.annotations, request.user)
    total = 0
    mixed = False  # episodes of a second group without --split-by-spec: the rest is only counted, for the error
    with WorkWriter(folder) as writer:
        for batch in iter_selected(repo, query, skipped):
            if mixed:
                for episode in batch:
                    groups.add(episode)
                continue
            grounding = _grounding_of(repo, batch, request.annotations)
            values = fields.values(batch)
            labels.update(step_tag_labels(batch))
            for episode in batch:
                group, index = groups.add(episode)
                if not request.split_by_spec and len(list(groups)) > 1:
                    mixed = True
                if mixed:
                    continue
                split = split_spec.split_of(episode.id) if split_spec else ""
                blob = episode.SerializeToString()
                writer.add(group.name, WorkItem(index, split, blob, grounding.get(episode.id, ()), values.get(episode.id)))
            total += len(batch)
    if mixed:  # refused before any episode of the rest was written (a 1M-episode selection: minutes of uploads)
        raise mixed_specs_error(repo, list(groups))
    return _Selected(
        groups=list(groups),
        skipped=skipped,
        step_tag_labels=tuple(sorted(labels)),
        field_defs=fields.defs,
        work_files={g.name: writer.path(g.name) for g in groups},
        work_key=writer.key,
        chunks=writer.chunks,
        episodes=total,
    )


# --- planning and the last step (driver) -------------------------------------------------------------------


@dataclass
class _Plan:
    group: SpecGroup
    job: DatasetJob
    env_specs: dict[str, Any] | None = None
    sample_error: str = ""
    work_file: str = ""  # the dataset's episodes (work_file.py)
    work_key: bytes = dataclasses.field(default=b"", repr=False)  # its seal: only this export reads it
    environment_spec: str = ""  # the study's EnvironmentSpec as JSON text ("" for UI datasets)
    space_specs: dict[str, Any] | None = None  # the specs the dataset's spaces come from (UI: derived)
    jpeg_frames: bool = False
    split_counts: dict[str, int] = dataclasses.field(default_factory=dict)  # Parquet: episodes per split, at the end


def environment_spec_json(repo: Any, group: SpecGroup) -> str:
    """The dataset's `EnvironmentSpec` (from its first episode's study) as JSON text; "" for UI datasets."""
    if group.kind == KIND_UI:
        return ""
    try:
        spec = repo.get_environment(group.first.study_id, group.environment_id)
    except Exception:  # noqa: BLE001 - a spec the store lacks: the dataset still has its data-derived specs
        return ""
    return json_format.MessageToJson(spec, sort_keys=True, indent=None)


def _sample(
    work_file: str, work_key: bytes, job: DatasetJob
) -> tuple[ExportEpisode | None, dict[str, Any] | None, str]:
    """Transforms the dataset's first readable episode (read from its work file, one at a time): it defines the
    dataset's features and specs."""
    errors = []
    for item in iter_items(work_file, work_key):
        episode = study_pb2.Episode.FromString(item.episode)
        try:
            reader = open_for_export(episode, job, item.grounding)
            try:
                steps = list(reader)
                specs = getattr(reader, "specs", None) or None
                metadata = reader.metadata
            finally:
                reader.close()
            exported = transform_episode(0, episode, steps, job.options, metadata, split="x" if job.splits else "")
            study_fields.apply(exported, job.field_defs, item.field_values)
        except Exception as exc:  # noqa: BLE001 - reported as the dead letters of the group
            errors.append(f"{episode_name(episode)}: {exc}")
            continue
        if specs and specs.get("observation_spec") is None:
            specs = None
        return exported, specs, ""
    return None, None, "; ".join(errors)


def _folder_size(path: str) -> int:
    """Bytes of the dataset files under `path` (the export's own work files, progress markers and owner file
    left out: they vary from run to run and are removed before publishing)."""
    return storage.total_size(path, skip=(WORK_DIR, "progress", OWNER_FILE))


def _run_with_progress(
    build: Callable[[beam.Pipeline], None],
    beam_args: Sequence[str],
    progress_dir: str,
    total: int,
    elements: int,
    progress: Progress | None,
) -> dict[str, int]:
    """Runs the pipeline in a worker thread and reports progress from the caller's thread.

    Progress is the share of episodes done (a marker file per chunk the workers write, so it works on any runner
    with a shared filesystem), scaled to 0-90%; the last step takes the rest. Reporting from the caller's thread
    matters for the annotator: Streamlit widgets can only be updated from the script's own thread.
    `elements` is how many elements the pipeline starts from (chunks of episodes). Returns its counters.
    """
    failure: list[BaseException] = []
    counters: dict[str, int] = {}

    def target() -> None:
        try:
            pipeline = beam.Pipeline(options=pipeline_options(spread_over_dask(beam_args, elements)))
            build(pipeline)
            result = pipeline.run()
            try:
                result.wait_until_finish()
                counters.update(_counters(result))
            finally:
                # DaskRunner opens its own Client to the scheduler and never closes it (it would then retry
                # for 30 s and log tracebacks once the cluster is gone); the cluster itself is not ours.
                runner_client = getattr(result, "client", None)
                if runner_client is not None:
                    runner_client.close()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=target, name="stepmark-export-pipeline", daemon=True)
    worker.start()
    last = 0.0  # export_episodes reported 0 before the pipeline started
    while worker.is_alive():
        worker.join(0.5)
        if progress is not None:
            pct = round(90.0 * min(count_done(progress_dir), total) / max(total, 1), 1)
            if pct != last:
                last = pct
                progress(pct)
    if failure:
        raise failure[0]
    return counters


def _counters(result: Any) -> dict[str, int]:
    """The export's Beam counters, summed over steps (empty when the runner does not report metrics)."""
    try:
        found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]
    except Exception:  # noqa: BLE001 - e.g. DaskRunner has no metrics API
        return {}
    totals: dict[str, int] = {}
    for counter in found:
        value = counter.committed if counter.committed is not None else counter.attempted
        totals[counter.key.metric.name] = totals.get(counter.key.metric.name, 0) + int(value or 0)
    return dict(sorted(totals.items()))


def check_beam_args(beam_args: Sequence[str]) -> None:
    """Refuses an unknown runner or a flag that is neither an export option nor a Beam pipeline option.

    Beam itself only logs "Discarding unparseable args" and goes on, so a mistyped export flag
    (`--strip-internal-metdata`) would silently export something else than asked for. The runner is created
    first because runner-specific options (e.g. DaskRunner's) register when the runner's module is imported.
    """
    options = pipeline_options(beam_args)
    check_runner(options)
    beam_logger = logging.getLogger("apache_beam.options.pipeline_options")
    level = beam_logger.level
    beam_logger.setLevel(logging.ERROR)  # its "Discarding unparseable args" warning: we raise instead
    try:
        known = options.get_all_options()
        every = options.get_all_options(retain_unknown_options=True)
    finally:
        beam_logger.setLevel(level)
    unknown = set(every) - set(known)
    if unknown:
        flags = [a.split("=", 1)[0] for a in beam_args if a.startswith("-")]
        named = [f for f in flags if f.lstrip("-").replace("-", "_") in unknown] or sorted(unknown)
        raise StepmarkError(
            f"unknown option(s) {', '.join(dict.fromkeys(named))}: neither an export option "
            "(stepmark export --help) nor a Beam pipeline option"
        )


def export_episodes(request: ExportRequest, progress: Progress | None = None) -> ExportSummary:
    """Runs one export; `progress(percent)` gets 0-100. Raises StepmarkError for bad requests or mixed specs."""
    if request.format not in FORMATS:
        raise StepmarkError(f"unknown format {request.format!r} (choose from {', '.join(FORMATS)})")
    storage.configure(request.beam_args)  # the driver's checks and every worker use the same filesystem flags
    check_beam_args(request.beam_args)
    out = check_out(request.out)
    split_spec = parse_splits(request.splits, request.split_seed) if request.splits else None
    parse_ui_objects(request.ui_objects)  # a bad value is an error before any work
    check_annotations(request.annotations, request.user)
    tfds_writer = None
    if request.format == "tfds":
        from pipelines.exporters import tfds_writer  # TensorFlow only on the TFDS path

        tfds_writer.require_tfds()
    if request.format == "minari":
        from pipelines.exporters import minari_writer

        minari_writer.check_request()

    query = SelectionQuery(
        refs=tuple(request.refs),
        study_id=request.study_id,
        tag=request.tag,
        state=request.state,
        include_incomplete=request.include_incomplete,
        include_invalid_sessions=request.include_invalid_sessions,
    )
    with open_store(request.store_url, request.data_dir) as repo:
        check_query(repo, query)  # a bad selection is an error before any staging folder
    remove_stale_staging(out)
    staging = new_staging(out, request.archive)
    root = storage.join(staging, "dataset") if request.archive else staging
    progress_dir = storage.join(staging, "progress")
    summary = ExportSummary(out=out, format=request.format, archive=request.archive)
    try:
        with open_store(request.store_url, request.data_dir) as repo:
            work = storage.join(staging, WORK_DIR, "episodes")
            selected = _stream_selection(repo, query, request, split_spec, work)
            groups = selected.groups  # more than one only with --split-by-spec (else _stream_selection refused)
            environment_specs = {g.name: environment_spec_json(repo, g) for g in groups}
        minari_ids = _minari_ids(request, out, groups)
        summary.skipped = [{"episode": s.episode, "reason": s.reason} for s in selected.skipped]
        if progress:
            progress(0.0)

        options = TransformOptions(
            strip_internal_metadata=request.strip_internal_metadata,
            end_of_episode_tags=tuple(request.end_of_episode_tags),
            step_tag_labels=selected.step_tag_labels,
            ui_objects_padded=parse_ui_objects(request.ui_objects),
        )
        plans: list[_Plan] = []
        for group in groups:
            dataset_dir = storage.join(root, group.name) if len(groups) > 1 else root
            if request.format == "minari" and len(groups) > 1:
                dataset_dir = storage.join(root, minari_ids[group.name]["folder"])
            job = DatasetJob(
                name=group.name,
                format=request.format,
                data_dir=str(Path(request.data_dir).absolute()),
                staging_dir=dataset_dir,
                progress_dir=progress_dir,
                options=options,
                expected_signature="",
                splits=split_spec,
                annotations=request.annotations,
                annotations_user=request.user,
                field_defs=selected.field_defs,
            )
            work_file = selected.work_files[group.name]
            sample, specs, error = _sample(work_file, selected.work_key, job)
            if sample is None:
                plans.append(
                    _Plan(group=group, job=job, sample_error=error, work_file=work_file, work_key=selected.work_key)
                )
                continue
            signature = envlogger_writer.episode_signature(sample)
            features_json = ""
            if tfds_writer is not None:
                features = tfds_writer.build_features(
                    sample, options, jpeg_frames=request.jpeg_frames
                )
                features_json = tfds_writer.features_to_json(features)
            work_dir = storage.join(staging, WORK_DIR, "tfds", group.name) if tfds_writer is not None else ""
            job = dataclasses.replace(
                job, expected_signature=signature, features_json=features_json, work_dir=work_dir
            )
            env_specs = specs or _derived_specs(sample)
            space_specs = env_specs or _ui_space_specs(sample, options)
            # --jpeg-frames: the observation leaf the recorded JPEG frames depict (None: as recorded; envlogger
            # always keeps the arrays, and NetHack or UI observations have no such leaf).
            frame = frame_leaf(sample) if request.jpeg_frames and request.format != "envlogger" else None
            if request.format == "parquet":
                from pipelines.exporters import parquet_writer

                info = _export_info(group, job, space_specs, environment_specs[group.name], frame is not None)
                schema = parquet_writer.schema_for(
                    sample, frame, options.strip_internal_metadata, info
                )
                job = dataclasses.replace(job, parquet_schema=parquet_writer.schema_to_bytes(schema))
            if request.format == "minari":
                from pipelines.exporters import minari_writer

                if group.kind == KIND_UI:  # padded objects: fixed shapes, spaces derived from the data
                    env_specs = envlogger_writer.specs_from_episode(sample)
                layout = minari_writer.layout_for(env_specs, frame, options.strip_internal_metadata)
                job = dataclasses.replace(
                    job,
                    minari_layout=layout.to_json(),
                    minari_id=minari_ids[group.name]["id"],
                    work_dir=storage.join(staging, WORK_DIR, "minari", group.name),
                )
            plans.append(
                _Plan(
                    group=group,
                    job=job,
                    env_specs=env_specs,
                    work_file=work_file,
                    environment_spec=environment_specs[group.name],
                    space_specs=space_specs,
                    jpeg_frames=frame is not None,
                )
            )

        runnable = [p for p in plans if not p.sample_error]
        jobs = {p.group.name: p.job for p in runnable}
        for job in jobs.values():  # TensorFlow's file writers do not create folders
            storage.mkdirs(job.staging_dir)
            if job.work_dir:
                storage.mkdirs(job.work_dir)

        chunks = [c for c in selected.chunks if c.dataset in jobs]

        def build(pipeline: beam.Pipeline) -> None:
            # Chunk references, not episodes: the workers read the episodes from the work files.
            _ = (
                pipeline
                | "Episodes" >> beam.Create(chunks, reshuffle=False)
                | "ExportDatasets" >> ExportDatasets(jobs)
            )

        if runnable:
            summary.counters = _run_with_progress(
                build, request.beam_args, progress_dir, selected.episodes, len(chunks), progress
            )
        for plan in plans:
            dataset_chunks = [c for c in chunks if c.dataset == plan.group.name]
            summary.datasets.append(_finish_dataset(plan, summary, len(groups), dataset_chunks))
        storage.delete_tree(storage.join(staging, WORK_DIR))
        if request.format == "parquet" and len(groups) > 1:  # one Hugging Face config per dataset
            from pipelines.exporters import parquet_writer

            cards = {p.group.name: (d.path, p.split_counts) for p, d in zip(plans, summary.datasets, strict=True)
                     if d.episodes}  # fmt: skip
            parquet_writer.write_index_card(root, cards)
        summary.episodes = sum(d.episodes for d in summary.datasets)
        summary.steps = sum(d.steps for d in summary.datasets)
        if summary.episodes == 0:
            raise StepmarkError(
                "no episode could be exported: "
                + "; ".join(f"{d.episode}: {d.reason}: {d.error}" for d in summary.dead_letters[:5])
            )
        storage.mkdirs(root)
        if summary.dead_letters:
            lines = "".join(json.dumps(asdict(letter)) + "\n" for letter in summary.dead_letters)
            storage.write_bytes(storage.join(root, DEAD_LETTERS_FILE), lines.encode("utf-8"))
        storage.delete_tree(progress_dir)
        summary.episode_bytes = sum(d.episode_bytes for d in summary.datasets)
        # Without `out` and the runner's counters (runners differ in reporting them): the same selection and
        # options give byte-identical files wherever and on whichever runner they are written.
        written = _with_own_size(summary, _folder_size(root))
        if staging == out:  # written in place in a bucket: the owner file goes before the summary publishes it
            storage.delete([storage.join(staging, OWNER_FILE)])
        # Written last: on an object store its presence is what marks the dataset complete (schemas/storage.md).
        storage.write_bytes(storage.join(root, SUMMARY_FILE), _summary_text(written))
        if request.archive:
            with tempfile.TemporaryDirectory(prefix="stepmark-archive-", dir=_local_dir(staging)) as local:
                zip_tmp = os.path.join(local, "dataset.zip")
                summary.bytes = archive.write_zip(root, zip_tmp)
                publish_file(zip_tmp, out)
            storage.delete_tree(staging)
        else:
            publish_folder(staging, out)
    except BaseException:
        with contextlib.suppress(Exception):
            storage.delete_tree(staging)
        raise
    if progress:
        progress(100.0)
    return summary


def _summary_text(written: dict[str, Any]) -> bytes:
    return (json.dumps(written, indent=2) + "\n").encode("utf-8")


def _with_own_size(summary: ExportSummary, files: int) -> dict[str, Any]:
    """The summary file's content, whose `bytes` counts every file of the output, itself included: `files`
    (the rest) plus the summary's own length, which depends on that number's digits (a fixed point, found in
    two or three rounds). Sets `summary.bytes` to it."""
    summary.bytes = files
    for _ in range(8):
        written = {k: v for k, v in summary.to_dict().items() if k not in ("out", "counters")}
        total = files + len(_summary_text(written))
        if total == summary.bytes:
            return written
        summary.bytes = total
    raise AssertionError(f"the summary's size did not settle: {summary.bytes}")  # the length grows by digits


def _local_dir(staging: str) -> str | None:
    """Where a local file of the export goes: the staging folder on a local disk (the ZIP is then linked into
    place on the same filesystem), the system's temporary folder when the staging folder is in a bucket."""
    return None if storage.is_remote(staging) else staging


def _minari_ids(request: ExportRequest, out: str, groups: Sequence[SpecGroup]) -> dict[str, dict[str, str]]:
    """`--format minari`: each dataset's Minari id and folder; refuses ragged UI datasets and bad names."""
    if request.format != "minari":
        return {}
    from pipelines.exporters import minari_writer

    padded = parse_ui_objects(request.ui_objects)
    for group in groups:
        minari_writer.check_group(group.kind, padded, group.name)
    ids = minari_writer.dataset_ids(PurePosixPath(out), request.archive, [g.name for g in groups])
    return {g: {"id": i, "folder": i.rpartition("/")[2]} for g, i in ids.items()}


def _derived_specs(sample: ExportEpisode) -> dict[str, Any] | None:
    if sample.meta.kind == KIND_UI:  # UI observations have per-screen object counts: no fixed dm_env spec
        return None
    return envlogger_writer.specs_from_episode(sample)


def _ui_space_specs(sample: ExportEpisode, options: TransformOptions) -> dict[str, Any]:
    """UI datasets' specs for their spaces: the action's always (its numeric fields have fixed shapes), the
    observation's only with `--ui-objects padded:N` (the full object table is ragged: no space)."""
    specs = envlogger_writer.specs_from_episode(sample)
    if not options.ui_objects_padded:
        specs["observation_spec"] = None
    return specs


def _export_info(
    group: SpecGroup,
    job: DatasetJob,
    env_specs: dict[str, Any] | None,
    environment_spec: str,
    jpeg_frames: bool = False,
) -> dict[str, Any]:
    """`stepmark_export`: the dataset-level metadata every format carries (schemas/dataset_spec.md)."""
    return {
        "format_version": 2,
        "kind": group.kind,
        "environment_id": group.environment_id or (UI_ENVIRONMENT_ID if group.kind == KIND_UI else ""),
        "strip_internal_metadata": job.options.strip_internal_metadata,
        "end_of_episode_tags": list(job.options.end_of_episode_tags),
        "step_tags": list(job.options.step_tag_labels),
        "splits": job.splits.to_dict() if job.splits else {},
        "environment_spec": environment_spec,
        "ui_objects": f"padded:{n}" if (n := job.options.ui_objects_padded) else "full",
        "split_names": list(split_names(job.splits)),
        "images": "jpeg_frames" if jpeg_frames else "as_recorded",
        **spaces.spaces_metadata(env_specs),
        "study_fields": study_fields.metadata(job.field_defs),
    }


def _finish_dataset(
    plan: _Plan, summary: ExportSummary, num_groups: int, chunks: Sequence[Chunk]
) -> DatasetSummary:
    """The last step for one dataset: its episodes' outcomes read a chunk at a time, in index order, and summed
    up (the dead letters and skips are listed), the spec check, and the format's metadata files."""
    group, job = plan.group, plan.job
    dataset = DatasetSummary(
        name=group.name,
        path=storage.split(job.staging_dir)[1] if num_groups > 1 else ".",
        kind=group.kind,
        environment_id=group.environment_id,
    )
    if plan.sample_error:
        for item in iter_items(plan.work_file, plan.work_key):
            name = episode_name(study_pb2.Episode.FromString(item.episode))
            summary.dead_letters.append(DeadLetter(name, "unreadable", plan.sample_error))
        return dataset
    dead: list[DeadLetter] = []
    skipped: list[dict[str, str]] = []
    by_split: dict[str, list[tuple[int, int]]] = {name: [] for name in split_names(job.splits)}  # TFDS
    minari_episodes: list[tuple[int, str, int]] = []  # Minari: (index, split, transitions)
    counts = {name: 0 for name in split_names(job.splits)}  # Parquet: episodes per split
    missing = 0
    for chunk, outcomes in iter_chunk_outcomes(job.progress_dir, chunks):
        if outcomes is None or len(outcomes) != chunk.count:
            missing += chunk.count - len(outcomes or ())
            continue
        for o in outcomes:
            _count_outcome(o, job, dataset, dead, skipped, by_split, minari_episodes, counts)
    if missing:  # a runner that dropped work must not look finished
        raise StepmarkError(
            f"dataset {group.name}: the runner reported {group.count - missing} of {group.count} "
            "episodes; the export is incomplete and was not written"
        )
    if sum(c.count for c in chunks) != group.count:
        raise StepmarkError(f"dataset {group.name}: the work file lists {sum(c.count for c in chunks)} of "
                            f"{group.count} episodes; the export is incomplete and was not written")  # fmt: skip
    summary.skipped.extend(sorted(skipped, key=lambda s: s["episode"]))
    mismatched = [d for d in dead if d.reason == "spec_mismatch"]
    if mismatched:
        raise StepmarkError(
            f"dataset {group.name}: episodes with another observation/action spec than "
            f"{job.expected_signature}: " + "; ".join(f"{d.episode} ({d.error})" for d in mismatched)
        )
    summary.dead_letters.extend(dead)
    if not dataset.episodes:  # every episode of this dataset is a dead letter: no empty dataset folder
        storage.delete_tree(job.staging_dir)
        return dataset
    description = (
        f"stepmark export of {dataset.episodes} episode(s) ({group.environment_id or group.kind}); "
        "fields: schemas/dataset_spec.md"
    )
    export_info = _export_info(group, job, plan.space_specs, plan.environment_spec, plan.jpeg_frames)
    if job.format == "tfds":
        from pipelines.exporters import tfds_writer

        written, _ = tfds_writer.finish_dataset(
            job.staging_dir, job.work_dir, job.features_json, by_split, description, {"stepmark_export": export_info}
        )
        if written != dataset.episodes:
            raise StepmarkError(
                f"dataset {group.name}: wrote {written} episodes, expected {dataset.episodes}"
            )
    elif job.format == "minari":
        from pipelines.exporters import minari_writer

        written = minari_writer.finish_dataset(
            job.staging_dir, job.work_dir, job.minari_id, minari_episodes, job.minari_layout, export_info, description,
            split_names(job.splits),
        )
        if written != dataset.episodes:
            raise StepmarkError(f"dataset {group.name}: wrote {written} episodes, expected {dataset.episodes}")
    elif job.format == "envlogger":
        envlogger_writer.write_dataset_metadata(job.staging_dir, plan.env_specs, {"stepmark_export": export_info})
    elif job.format == "parquet":  # the workers' files are the dataset; the metadata is in their schema
        from pipelines.exporters import parquet_writer

        parquet_writer.finish_dataset(job.staging_dir, job.parquet_schema, counts)
        plan.split_counts = counts
    dataset.bytes = _folder_size(job.staging_dir)
    return dataset


def _count_outcome(
    o: dict[str, Any],
    job: DatasetJob,
    dataset: DatasetSummary,
    dead: list[DeadLetter],
    skipped: list[dict[str, str]],
    by_split: dict[str, list[tuple[int, int]]],
    minari_episodes: list[tuple[int, str, int]],
    counts: dict[str, int],
) -> None:
    """One episode's outcome added to its dataset's totals and lists. Outcomes come in selection order, so an
    episode's position in the written dataset is the count of episodes written before it: where skipped
    episodes or dead letters left a gap, its files are renumbered to it (`episode_index` = position, 0..n-1;
    `selection_index` keeps the selection's)."""
    if o["outcome"] == ExportEpisodeFn.RESULT:
        index, position, split = int(o["index"]), dataset.episodes, o.get("split") or ""
        dataset.episodes += 1
        dataset.steps += int(o["steps"])
        dataset.episode_bytes += int(o.get("bytes", 0))
        if job.format == "tfds":
            by_split.setdefault(split or "train", []).append((index, position))
        elif job.format == "minari":  # written in order as episode_<position> (minari_writer.finish_dataset)
            minari_episodes.append((index, split, int(o["steps"]) - 1))
        elif job.format == "parquet":
            counts[split or "train"] += 1
            if position != index:
                from pipelines.exporters import parquet_writer

                parquet_writer.move_episode_file(job.staging_dir, split, index, position)
        elif job.format == "envlogger" and position != index:
            envlogger_writer.move_shard(job.staging_dir, index, position, o["metadata"])
    elif o["outcome"] == ExportEpisodeFn.DEAD_LETTER:
        dead.append(DeadLetter(episode=o["episode"], reason=o["reason"], error=o["error"]))
    elif o["outcome"] == ExportEpisodeFn.SKIPPED:
        skipped.append({"episode": o["episode"], "reason": o["reason"]})


# --- command line -------------------------------------------------------------------------------------------


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    """The export options (the `stepmark export` subcommand and `run(argv)` share them)."""
    what = parser.add_argument_group("selection (all given filters apply)")
    what.add_argument("--study", dest="study_id", help="every episode of this study")
    what.add_argument(
        "--episode",
        dest="refs",
        action="append",
        default=[],
        metavar="STUDY/SESSION/EPISODE",
        help="one episode",
    )
    what.add_argument("--tag", help="episodes carrying this episode or step tag")
    what.add_argument("--state", help="episodes in this state (completed, abandoned, cancelled, rejected)")
    what.add_argument("--include-incomplete", action="store_true", help="also episodes not COMPLETED")
    what.add_argument(
        "--include-invalid-sessions", action="store_true", help="also episodes of invalid sessions"
    )
    how = parser.add_argument_group("output")
    how.add_argument(
        "--format",
        choices=FORMATS,
        default="envlogger",
        help="envlogger (Riegeli, for envlogger.Reader; default), tfds (TFDS/RLDS folder; needs the [tfds] "
        "extra), parquet (one table of steps for pyarrow, pandas, Hugging Face datasets) or minari (a Minari "
        "HDF5 dataset for minari.load_dataset; --out's name is its id, NAME-vN; UI needs --ui-objects padded:N)",
    )
    how.add_argument("--out", required=True, help="dataset folder (or ZIP file with --archive) to create")
    how.add_argument("--archive", action="store_true", help="write one ZIP file instead of a folder")
    how.add_argument(
        "--strip-internal-metadata",
        action="store_true",
        help="drop images, pressed keys, info, episode tags and notes (keeps ids and statistics)",
    )
    how.add_argument(
        "--end-of-episode-tag",
        dest="end_of_episode_tags",
        action="append",
        default=[],
        metavar="TAG",
        help="cut each episode at its first step carrying this tag (repeatable)",
    )
    how.add_argument("--split-by-spec", action="store_true", help="one dataset per environment spec")
    how.add_argument(
        "--split",
        dest="splits",
        default="",
        metavar="NAME=FRACTION,...",
        help="split episodes by a hash of their id, e.g. train=0.8,val=0.1,test=0.1 (stable when episodes are added)",
    )
    how.add_argument("--split-seed", type=int, default=0, help="seed of the split hash (default 0)")
    how.add_argument(
        "--ui-objects",
        default="full",
        metavar="full|padded:N",
        help="UI episodes: the full ragged object table (default) or N fixed-shape rows with a mask",
    )
    how.add_argument(
        "--annotations",
        default="consensus",
        choices=["none", "mine", "all", "consensus"],
        help="UI episodes: which grounding annotations (corrected targets, object labels, drawn and corrected "
        "boxes) apply on top of the converted record: consensus (default: what most of a step's annotators "
        "agree on), all, mine (--user's), none; and which values of the study's own fields become the typed "
        "field:<name> columns: consensus (adjudicated, else a majority), all (the newest), mine, none (no columns)",
    )
    how.add_argument(
        "--jpeg-frames",
        action="store_true",
        help="LOSSY: TFDS, Parquet and Minari store the image observation as the recorded JPEG frames (smaller; "
        "decoded, they differ from the observation). Default: the observation as recorded (exact)",
    )
    # The default since the observation is exported as recorded; accepted so that old scripts still run.
    how.add_argument("--lossless-images", action="store_true", help=argparse.SUPPRESS)


def request_from_args(args: argparse.Namespace, beam_args: Sequence[str]) -> ExportRequest:
    return ExportRequest(
        data_dir=args.data,
        out=args.out,
        format=args.format,
        store_url=args.store,
        refs=[parse_ref(r) for r in args.refs],
        study_id=args.study_id,
        tag=args.tag,
        state=args.state,
        archive=args.archive,
        strip_internal_metadata=args.strip_internal_metadata,
        end_of_episode_tags=list(args.end_of_episode_tags),
        include_incomplete=args.include_incomplete,
        include_invalid_sessions=args.include_invalid_sessions,
        split_by_spec=args.split_by_spec,
        splits=args.splits,
        split_seed=args.split_seed,
        jpeg_frames=args.jpeg_frames,
        ui_objects=args.ui_objects,
        annotations=args.annotations,
        user=getattr(args, "user", None) or "",
        beam_args=list(beam_args),
    )


def print_progress(percent: float) -> None:
    print(f"export: {percent:5.1f}%", flush=True)


def run(argv: Sequence[str] | None = None) -> int:
    """Entry point in the style of apache_beam/examples: known options here, the rest go to Beam."""
    parser = argparse.ArgumentParser(prog="stepmark export", description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("STEPMARK_DATA", "./stepmark-data"))
    parser.add_argument("--store", default=os.environ.get("STEPMARK_STORE"))
    add_export_arguments(parser)
    args, beam_args = parser.parse_known_args(list(argv) if argv is not None else None)
    args.data = str(storage.local_path(args.data, "--data", "export"))
    summary = export_episodes(request_from_args(args, beam_args), print_progress)
    print(summary.describe())
    return 1 if summary.dead_letters else 0


if __name__ == "__main__":  # python -m pipelines.export ... (same flags as `stepmark export`)
    import sys

    try:
        sys.exit(run())
    except StepmarkError as exc:
        print(f"stepmark export: error: {exc}", file=sys.stderr)
        sys.exit(2)
