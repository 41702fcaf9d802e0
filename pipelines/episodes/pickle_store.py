"""Episode data as one Pickle file, in RLDS Creator's layout, for compatibility with data it wrote.

The file holds a dict: `metadata` (episode metadata), `steps` (a list of `(timestep, action, custom_data)`
records, envlogger-shaped), and `observation_spec`, `action_spec`, `reward_spec`, `discount_spec`.
Pickle runs code on load, so the reader only accepts the classes such a file needs (numpy arrays and
scalars, dm_env time steps and specs, the StepData tuples of envlogger and RLDS Creator) and refuses
anything else with the file and the class named. The whole file is loaded on open (the format has no index).

While an episode is written, each step is also appended to `steps.journal` beside it (a pickled specs dict,
then one pickled StepData per step, each written to the OS at once): the file is written only on close, so a
recorder killed before that leaves its steps in the journal, and `salvage_journal` rebuilds the episode from
the complete records. The journal is deleted once the file is written.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path, PurePosixPath
from typing import Any

import dm_env
from dm_env import specs as dm_specs
from envlogger import step_data

from pipelines.episodes.base import EnvSpecs, EpisodeMetadata, EpisodeWriter, RecordEpisodeReader
from pipelines.episodes.layout import JOURNAL_NAME, PICKLE_NAME
from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2

FORMAT = "pickle"

# (module, name) -> object a file may reference. RLDS Creator's own StepData/TimeStep map onto the
# envlogger/dm_env equivalents (same fields, same order).
_ALLOWED: dict[tuple[str, str], Any] = {
    ("dm_env._environment", "TimeStep"): dm_env.TimeStep,
    ("dm_env._environment", "StepType"): dm_env.StepType,
    ("dm_env", "TimeStep"): dm_env.TimeStep,
    ("dm_env", "StepType"): dm_env.StepType,
    ("envlogger.step_data", "StepData"): step_data.StepData,
    ("rlds_creator.episode_storage", "StepData"): step_data.StepData,
    ("rlds_creator.environment", "TimeStep"): dm_env.TimeStep,
    ("collections", "OrderedDict"): __import__("collections").OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
}
for _name in ("Array", "BoundedArray", "DiscreteArray", "StringArray"):
    _ALLOWED[("dm_env.specs", _name)] = getattr(dm_specs, _name)
_NUMPY_NAMES = {"_reconstruct", "ndarray", "dtype", "scalar", "_frombuffer"}
_DTYPE_CLASS = re.compile(r"[A-Z][A-Za-z0-9]*DType")
_NUMPY_MODULES = {"numpy", "numpy.core.multiarray", "numpy._core.multiarray", "numpy.core.numeric"}


class _SafeUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, path: Path) -> None:
        super().__init__(file)
        self._path = path

    def find_class(self, module: str, name: str) -> Any:
        """Only the exact names above. Protocol 4 resolves a dotted name attribute by attribute, so a
        prefix test would let `numpy.dtypes` + `<function>.__builtins__.get` reach `eval`: match whole names."""
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        if module in _NUMPY_MODULES and name in _NUMPY_NAMES:
            return super().find_class(module, name)
        # numpy>=1.25 pickles dtype classes as numpy.dtypes.<X>DType (or numpy + "dtypes.<X>DType")
        dtype_class = (
            name if module == "numpy.dtypes" else name.removeprefix("dtypes.") if module == "numpy" else ""
        )
        if _DTYPE_CLASS.fullmatch(dtype_class) and (module == "numpy.dtypes" or name.startswith("dtypes.")):
            import numpy.dtypes

            found = getattr(numpy.dtypes, dtype_class, None)
            if isinstance(found, type):
                return found
        raise StepmarkError(f"{self._path}: refusing to load class {module}.{name} from an episode pickle")


def load_pickle(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        with p.open("rb") as f:
            data = _SafeUnpickler(f, p).load()
    except FileNotFoundError as exc:
        raise StepmarkError(f"{p}: episode pickle not found") from exc
    except StepmarkError:
        raise
    except Exception as exc:  # truncated or corrupt file: pickle raises many types
        raise StepmarkError(f"{p}: not a readable episode pickle: {type(exc).__name__}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        raise StepmarkError(f"{p}: episode pickle has no 'steps' list (not an RLDS Creator episode)")
    return data


class PickleEpisodeWriter(EpisodeWriter):
    """Keeps the episode in memory and writes the file on close (temp name, then renamed)."""

    def __init__(self, folder: Path, relative: PurePosixPath, specs: EnvSpecs) -> None:
        super().__init__(folder, relative, specs)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._steps: list[step_data.StepData] = []
        self._journal = (self.folder / JOURNAL_NAME).open("wb")  # noqa: SIM115 - closed by close()/abort()
        pickle.dump(_spec_dict(specs), self._journal, protocol=pickle.HIGHEST_PROTOCOL)
        self._journal.flush()

    def _record(self, data: step_data.StepData) -> None:
        self._steps.append(data)
        pickle.dump(data, self._journal, protocol=pickle.HIGHEST_PROTOCOL)
        self._journal.flush()  # to the OS: survives the process being killed (no fsync: not a power cut)

    def close(self, metadata: EpisodeMetadata) -> study_pb2.Episode.Storage:
        if not self.closed:
            data = {"metadata": metadata.to_dict(), "steps": self._steps, **_spec_dict(self.specs)}
            write_pickle(self.folder / PICKLE_NAME, data)
            self._steps = []
            self._journal.close()
            (self.folder / JOURNAL_NAME).unlink(missing_ok=True)
            self.closed = True
        storage = study_pb2.Episode.Storage()
        storage.pickle.path = str(self.relative / PICKLE_NAME)
        return storage

    def abort(self) -> None:
        self._steps = []
        self._journal.close()
        self.closed = True


def _spec_dict(specs: EnvSpecs) -> dict[str, Any]:
    return {
        "observation_spec": specs.observation_spec(),
        "action_spec": specs.action_spec(),
        "reward_spec": specs.reward_spec(),
        "discount_spec": specs.discount_spec(),
    }


def write_pickle(target: Path, data: dict[str, Any]) -> None:
    """The episode file, durably, under a temporary name first (a reader never sees half a file)."""
    partial = target.with_suffix(".pkl.partial")
    with partial.open("wb") as f:
        pickle.dump(data, f, protocol=pickle.HIGHEST_PROTOCOL)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, target)


def salvage_journal(journal: str | Path, out: str | Path) -> int:
    """Writes `out/episode.pkl` from the complete records of a killed writer's `steps.journal` (its specs
    header, then its steps up to the first record cut short); returns how many records it holds. Raises
    StepmarkError when there is no step to write."""
    path = Path(journal)
    size = path.stat().st_size
    steps: list[step_data.StepData] = []
    with path.open("rb") as f:
        try:
            header = _SafeUnpickler(f, path).load()  # one unpickler a record: each was dumped on its own
        except StepmarkError:
            raise
        except Exception as exc:  # noqa: BLE001 - pickle raises many types on a cut or damaged file
            raise StepmarkError(f"{path}: unreadable journal: {type(exc).__name__}: {exc}") from exc
        if not isinstance(header, dict):
            raise StepmarkError(f"{path}: journal has no specs header")
        while f.tell() < size:
            try:
                rec = _SafeUnpickler(f, path).load()
            except StepmarkError:
                raise
            except Exception:  # noqa: BLE001 - the record the kill cut short: the ones before it are kept
                break
            if not (isinstance(rec, tuple) and len(rec) >= 2 and isinstance(rec[0], dm_env.TimeStep)):
                break
            steps.append(step_data.StepData(rec[0], rec[1], rec[2] if len(rec) > 2 else None))
    if not steps:
        raise StepmarkError(f"{path}: no complete step in the journal")
    specs = {k: header.get(k) for k in ("observation_spec", "action_spec", "reward_spec", "discount_spec")}
    Path(out).mkdir(parents=True, exist_ok=True)
    write_pickle(Path(out) / PICKLE_NAME, {"metadata": {}, "steps": steps, **specs})
    return len(steps)


class PickleEpisodeReader(RecordEpisodeReader):
    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self._data = load_pickle(self.path)
        self._steps = self._data["steps"]
        for k, rec in enumerate(self._steps):
            if not (isinstance(rec, tuple) and len(rec) >= 2 and isinstance(rec[0], dm_env.TimeStep)):
                raise StepmarkError(f"{self.path}: step {k} is not a (timestep, action, custom_data) record")
        meta = self._data.get("metadata")
        self._metadata = dict(meta) if isinstance(meta, dict) else {}
        self._metadata.setdefault("format", FORMAT)

    def _num_records(self) -> int:
        return len(self._steps)

    def _load_record(self, k: int) -> step_data.StepData:
        rec = self._steps[k]
        return step_data.StepData(rec[0], rec[1], rec[2] if len(rec) > 2 else None)

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(self._metadata)

    @property
    def specs(self) -> dict[str, Any]:
        return {
            k: self._data.get(k) for k in ("observation_spec", "action_spec", "reward_spec", "discount_spec")
        }
