"""What an export is asked for (`ExportRequest`) and what it reports (`ExportSummary`, dead letters).

Kept apart from the Beam job so the CLI, the annotator's Export page and tests share one request type.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from protos.rlds_creator import client_pb2


@dataclass
class ExportRequest:
    """Everything one export needs. `from_download_request` maps the protocol's DownloadEpisodesRequest."""

    data_dir: str
    out: str
    format: str = "envlogger"
    store_url: str | None = None
    refs: list[client_pb2.EpisodeRef] = field(default_factory=list)
    study_id: str | None = None
    tag: str | None = None
    state: str | None = None
    archive: bool = False
    strip_internal_metadata: bool = False
    end_of_episode_tags: list[str] = field(default_factory=list)
    include_incomplete: bool = False
    include_invalid_sessions: bool = False
    split_by_spec: bool = False
    splits: str = ""  # --split train=0.8,val=0.1,test=0.1 (empty: one split, train)
    split_seed: int = 0
    # Lossy opt-in: the observation's frame leaf as the recorded JPEG bytes (TFDS, Parquet, Minari) instead of
    # the observation as recorded (the default: raw arrays; Minari: PNG). `schemas/dataset_spec.md`, "Images".
    jpeg_frames: bool = False
    ui_objects: str = ""  # "" / "full": the ragged object table; "padded:N": fixed-shape tensors with a mask
    annotations: str = "consensus"  # grounding annotations applied to UI episodes: none|mine|all|consensus
    user: str = ""  # whose annotations `mine` means
    beam_args: list[str] = field(default_factory=list)

    @classmethod
    def from_download_request(
        cls,
        request: client_pb2.DownloadEpisodesRequest,
        *,
        data_dir: str | os.PathLike[str],
        out: str | os.PathLike[str],
        format: str = "envlogger",  # noqa: A002 - the option's name
        store_url: str | None = None,
        **kwargs: Any,
    ) -> ExportRequest:
        return cls(
            data_dir=str(data_dir),
            out=str(out),
            format=format,
            store_url=store_url,
            refs=[client_pb2.EpisodeRef.FromString(r.SerializeToString()) for r in request.refs],
            archive=request.archive,
            strip_internal_metadata=request.strip_internal_metadata,
            end_of_episode_tags=list(request.end_of_episode_tags),
            **kwargs,
        )


@dataclass
class DeadLetter:
    episode: str  # study/session/episode
    reason: str  # unreadable | missing_statistic | inconsistent | no_transition | spec_mismatch | write_failed
    error: str


@dataclass
class DatasetSummary:
    name: str
    path: str  # where the dataset is inside the output (the output itself for a single dataset)
    kind: str
    environment_id: str
    episodes: int = 0
    steps: int = 0
    bytes: int = 0  # the dataset's files (the summary file and dead letters are beside them, at the top)
    episode_bytes: int = 0  # of which the episode files the workers wrote


@dataclass
class ExportSummary:
    out: str
    format: str
    archive: bool
    datasets: list[DatasetSummary] = field(default_factory=list)
    episodes: int = 0
    steps: int = 0
    # Every file of the output, this summary file included (with --archive: the ZIP file; the summary inside
    # it counts the files in the ZIP, uncompressed). `episode_bytes`: the episode files the workers wrote (the
    # `episode_bytes` counter); the rest is the last step's metadata files, the dead letters and this summary.
    bytes: int = 0
    episode_bytes: int = 0
    dead_letters: list[DeadLetter] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)  # Beam counters (namespace stepmark.export)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        lines = [
            f"exported {self.episodes} episode(s), {self.steps} step(s), {self.bytes:,} bytes "
            f"as {self.format}{' (ZIP)' if self.archive else ''} to {self.out} "
            f"({self.episode_bytes:,} bytes of episode files)"
        ]
        if len(self.datasets) > 1:
            for d in self.datasets:
                lines.append(
                    f"  {d.path}: {d.episodes} episode(s), {d.steps} step(s) [{d.environment_id or d.kind}]"
                )
        if self.counters:
            lines.append("  counters: " + ", ".join(f"{k}={v}" for k, v in self.counters.items()))
        for s in self.skipped:
            lines.append(f"  left out {s['episode']}: {s['reason']}")
        for d in self.dead_letters:
            lines.append(f"  dead letter {d.episode}: {d.reason}: {d.error}")
        return "\n".join(lines)
