"""Real data for the export tests: a SQLite store with episodes recorded by the recorder in two environments
(Procgen coinrun and NetHack), step and episode tags set through the store, and (when convert-ui and the UI
import have landed) UI episodes converted from ../shared/fixtures/rico screens.

Built once per test session (recording is the slow part) and never modified by tests: tests that change the
store copy the data folder first (`copy_data`).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.store import open_store
from protos.rlds_creator import client_pb2, study_pb2

ALICE = "alice@example.com"
PROCGEN_ENV = "coinrun"
NETHACK_ENV = "nethack-score"
UI_STUDY = "Rico screens"


@dataclass
class ExportData:
    data_dir: Path
    study_id: str  # the two-environment study
    procgen: list[study_pb2.Episode]
    nethack: list[study_pb2.Episode]
    ui_study_id: str | None = None
    ui: list[study_pb2.Episode] = field(default_factory=list)
    # Refs of episodes that must NOT be exported by default.
    rejected: client_pb2.EpisodeRef | None = None
    invalid_session: client_pb2.EpisodeRef | None = None

    def ref(self, episode: study_pb2.Episode) -> client_pb2.EpisodeRef:
        return client_pb2.EpisodeRef(
            study_id=episode.study_id, session_id=episode.session_id, episode_id=episode.id
        )


def study_spec(max_steps: int) -> study_pb2.StudySpec:
    spec = study_pb2.StudySpec(name="Export round trips", description="two environments")
    coin = spec.environment_specs.add(id=PROCGEN_ENV, name="CoinRun", sync=True, max_episode_steps=max_steps)
    coin.procgen.id = "coinrun"
    coin.procgen.rand_seed = 5
    nh = spec.environment_specs.add(id=NETHACK_ENV, name="NetHack", sync=True, max_episode_steps=max_steps)
    nh.net_hack.id = "NetHackScore-v0"
    return spec


def ui_available() -> bool:
    try:
        import pipelines.convert  # noqa: F401
        import pipelines.ui_import  # noqa: F401
    except ModuleNotFoundError:
        return False
    return True


def import_ui_traces(data_dir: Path, fixtures: Path, repo) -> str:  # type: ignore[no-untyped-def]
    """Converts the DroidBot Yelp run (one multi-step episode) and two Rico screens (one-step episodes) with
    convert-ui and imports them as a UI study; returns its id."""
    from pipelines import convert, ui_import

    screens = data_dir / "ui-input"
    screens.mkdir()
    shutil.copytree(fixtures / "droidbot" / "yelp", screens / "yelp")  # a tmp copy: discovery skips symlinks
    for name in sorted(p.stem for p in (fixtures / "rico").glob("*.json"))[:2]:
        for ext in (".json", ".jpg"):
            src = fixtures / "rico" / f"{name}{ext}"
            if src.exists():
                (screens / src.name).symlink_to(src)
    out = data_dir / "converted"
    code = convert.run([str(screens), str(out), "--runner=FnApiRunner", "--follow-links"])  # rico: symlinks
    assert code in (0, None), f"convert-ui failed with {code}"
    return ui_import.import_ui(repo, str(out), study_name=UI_STUDY, user=ALICE).id


def build(data_dir: Path, fixtures: Path, *, episodes: int = 2, max_steps: int = 12) -> ExportData:
    from annotator.recorder import record_batch

    data_dir.mkdir(parents=True, exist_ok=True)
    with open_store(None, data_dir) as repo:
        study = repo.create_study(study_spec(max_steps), ALICE)
        procgen = record_batch(repo, data_dir, study.id, PROCGEN_ENV, episodes + 1, "random", user=ALICE,
                               seed=11, progress=False)  # fmt: skip
        nethack = record_batch(repo, data_dir, study.id, NETHACK_ENV, episodes, "random", user=ALICE, seed=12,
                               progress=False)  # fmt: skip
        # The extra Procgen episode is rejected: left out unless incomplete episodes are asked for.
        rejected = procgen.pop()
        repo.set_episode_state(repo.ref(rejected), study_pb2.Episode.STATE_REJECTED, ALICE)
        # One more Procgen episode in a session that is then marked invalid.
        invalid = record_batch(repo, data_dir, study.id, PROCGEN_ENV, 1, "random", user="bob@example.com",
                               seed=13, progress=False)[0]  # fmt: skip
        repo.set_session_state(invalid.session_id, study_pb2.Session.STATE_INVALID)
        # Tags: a step tag on one episode of each environment, an end-of-episode tag on the first Procgen one.
        p0, p1, n0 = procgen[0], procgen[1], nethack[0]
        repo.add_step_tag(repo.ref(p0), 2, "jump", ALICE)
        repo.add_step_tag(repo.ref(p0), 5, "goal", ALICE)
        repo.add_step_tag(repo.ref(p0), 7, "goal", ALICE)  # only the first "goal" cuts
        repo.add_step_tag(repo.ref(p1), 4, "jump", ALICE)
        repo.add_step_tag(repo.ref(n0), 3, "door", ALICE)
        repo.add_episode_tag(repo.ref(p0), "good run", ALICE)
        repo.set_notes(repo.ref(p0), "reached the ledge", ALICE)
        procgen = [repo.get_episode(repo.ref(e)) for e in procgen]
        nethack = [repo.get_episode(repo.ref(e)) for e in nethack]
        data = ExportData(data_dir=data_dir, study_id=study.id, procgen=procgen, nethack=nethack)
        data.rejected = data.ref(rejected)
        data.invalid_session = data.ref(invalid)
        if ui_available():
            data.ui_study_id = import_ui_traces(data_dir, fixtures, repo)
            # The multi-step DroidBot episode first.
            data.ui = sorted(repo.list_episodes(study_id=data.ui_study_id), key=lambda e: -e.num_steps)
            repo.add_step_tag(data.ref(data.ui[0]), 1, "login", ALICE)
            repo.add_step_tag(data.ref(data.ui[0]), 4, "done", ALICE)
            data.ui[0] = repo.get_episode(data.ref(data.ui[0]))
    return data


def copy_data(data: ExportData, dest: Path) -> Path:
    """A private copy of the data folder for tests that change the store or the files."""
    shutil.copytree(data.data_dir, dest, symlinks=True)
    return dest


def register_copies(data_dir: Path, episode: study_pb2.Episode, n: int) -> str:
    """A new study holding `n` registrations of one recorded episode's files (real data, many episodes fast);
    returns the study id."""
    with open_store(None, data_dir) as repo:
        source = repo.get_study(episode.study_id)
        spec = study_pb2.StudySpec(name="many copies")
        spec.environment_specs.extend(e for e in source.environment_specs if e.id == episode.environment_id)
        study = repo.create_study(spec, ALICE)
        session = repo.create_session(study.id, ALICE)
        copies = []
        for _ in range(n):
            copy = study_pb2.Episode()
            copy.CopyFrom(episode)
            copy.ClearField("id")
            copy.ClearField("step_metadata")
            copy.ClearField("tags")
            copy.study_id, copy.session_id = study.id, session.id
            copies.append(copy)
        repo.add_episodes(copies)
    return study.id
