"""UI episodes (converted Android traces) behind the same reader interface as environment episodes.

A UI episode is one `UiEpisode` record in a convert-ui TFRecord shard; the store keeps where it is in the
episode's metadata (`"ui_record": {"shard", "offset", "episode_id"}`) and the record is read by byte offset.
Steps: observation i is the reference `Observation` proto (screenshot, view objects), the action is the
`stepmark.Action` taken on that screen, rewards are 0 (UI traces have none) and `info` is the step's
`StepInfo` as a dict. The last screen is the final step (`is_last`); traces do not say whether the task
ended there, so `is_terminal` is False.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from google.protobuf import json_format

from pipelines.episodes.base import EpisodeReader, Step
from pipelines.episodes.layout import resolve
from pipelines.errors import StepmarkError
from protos.stepmark import ui_episode_pb2

FORMAT = "ui"


class UiEpisodeReader(EpisodeReader):
    """Reads the whole record once (a UiEpisode is one protobuf); steps are views into it."""

    def __init__(self, record: ui_episode_pb2.UiEpisode, *, source: str = "") -> None:
        self.record = record
        self.source = source
        self._steps = record.episode.time_steps

    @classmethod
    def open(cls, shard: str | Path, offset: int, *, episode_id: str = "") -> UiEpisodeReader:
        # The CONVERT helper's reader (the one home for shards). Imported here: it pulls in Apache Beam
        # (~2 s), which recording and envlogger/pickle reading never need.
        from pipelines import ui_records

        path = str(shard)
        if "://" not in path and not Path(path).is_file():  # URLs (gs://...) go to Beam's filesystems
            raise StepmarkError(f"{path}: UI record shard not found")
        record = ui_records.read_episode(path, int(offset))
        if episode_id and record.episode_id != episode_id:
            raise StepmarkError(
                f"{path}@{offset}: holds UI episode {record.episode_id!r}, expected {episode_id!r}"
            )
        return cls(record, source=f"{path}@{offset}")

    def __len__(self) -> int:
        return len(self._steps)

    def step(self, i: int) -> Step:
        i = self._check_index(i)
        ts = self._steps[i]
        obs = ts.observation
        action: ui_episode_pb2.Action | None = (
            self.record.actions[i] if i < len(self.record.actions) else None
        )
        info: dict[str, Any] = {}
        if i < len(self.record.step_info):
            info = json_format.MessageToDict(self.record.step_info[i], preserving_proto_field_name=True)
        return Step(
            index=i,
            observation=obs,
            action=action,
            reward=0.0,
            discount=1.0 if i + 1 < len(self) else 0.0,
            is_first=i == 0,
            is_last=i + 1 == len(self),
            is_terminal=False,
            image=bytes(obs.screenshot) if obs.screenshot else None,
            keys=[],
            info=info,
        )

    @property
    def metadata(self) -> dict[str, Any]:
        r = self.record
        meta: dict[str, Any] = dict(r.metadata)
        meta.update(
            {
                "format": FORMAT,
                "episode_id": r.episode_id,
                "app_package": r.app_package,
                "source": r.source,
                "source_path": r.source_path,
                "goal": r.goal,
            }
        )
        return meta


def open_ui_episode(ui_record: dict[str, Any], data_dir: str | Path) -> UiEpisodeReader:
    """`ui_record` is the store's `metadata["ui_record"]`; a relative shard path is under the data dir."""
    try:
        shard = str(ui_record["shard"])
        offset = int(ui_record["offset"])
    except (KeyError, TypeError, ValueError) as exc:
        raise StepmarkError(f"UI episode metadata has no usable shard/offset: {ui_record!r}") from exc
    location = shard if "://" in shard else str(resolve(data_dir, shard))
    return UiEpisodeReader.open(location, offset, episode_id=str(ui_record.get("episode_id", "")))
