"""Micro-benchmark of envlogger `Data` encoding and decoding on real records: the export's serializer
(pipelines/exporters/envlogger_data.py) and the reader's decoder (pipelines/episodes/fast_decode.py).

Records the export tests' data (tests/pipelines/export/export_data.py: Procgen coinrun, NetHack dict
observations, UI screens; or reuses `--data DIR` from an earlier run), turns each episode into envlogger records
(`envlogger_writer.episode_records`), then serializes every record with the generic serializer
(`serialize_generic`) and with `serialize` (per-structure plans), interleaved, CPU time, best of N. Prints
us/step for both, their ratio, and whether the bytes are identical. Then decodes the same records as the
recorder writes them (`fast_codec.serialize`: dicts as proto maps; the export writes `kvs` pairs, which plans
do not cover and the walk reads) with envlogger's codec (`codec.decode(Data.FromString(raw))`, what `envlogger.Reader` does), with `fast_decode`'s walk, and with
`fast_decode.decode` (plans per record layout): us/step, ratios to the codec, and whether the values are equal.

    .venv/bin/python bench/bench_serialize.py [--data /tmp/sbench/data] [--repeat 7]
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from envlogger.converters import codec  # noqa: E402
from envlogger.proto import storage_pb2  # noqa: E402

from pipelines.episodes import fast_codec, fast_decode, open_episode  # noqa: E402
from pipelines.exporters import envlogger_data, envlogger_writer  # noqa: E402
from pipelines.exporters.transform import TransformOptions, transform_episode  # noqa: E402
from tests.pipelines.export.export_data import ExportData, build  # noqa: E402

FIXTURES = REPO.parent / "shared" / "fixtures"


def load(data_dir: Path) -> ExportData:
    cache = data_dir / "bench_serialize.pickle"
    if cache.exists():
        return pickle.loads(cache.read_bytes())
    data = build(data_dir, FIXTURES)
    cache.write_bytes(pickle.dumps(data))
    return data


def records(data: ExportData) -> dict[str, list[tuple]]:
    out = {}
    for name, episodes in (("procgen", data.procgen), ("nethack", data.nethack), ("ui", data.ui[:1])):
        recs: list[tuple] = []
        for n, episode in enumerate(episodes):
            with open_episode(episode, data.data_dir) as reader:
                steps, meta = list(reader), reader.metadata
            ep = transform_episode(n, episode, steps, TransformOptions(step_tag_labels=("jump",)), meta)
            recs.extend(tuple(r) for r in envlogger_writer.episode_records(ep))
        out[name] = recs
    return out


def cpu_us(fn, recs: list[tuple]) -> float:
    start = time.process_time()
    for r in recs:
        fn(r)
    return (time.process_time() - start) / len(recs) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("/tmp/bench_serialize/data"))
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--inner", type=int, default=20, help="passes over the records per timing")
    args = parser.parse_args()
    by_family = records(load(args.data))
    old, new = envlogger_data.serialize_generic, envlogger_data.serialize
    print(f"{'family':10} {'steps':>5} {'generic us':>10} {'plans us':>9} {'ratio':>6}  identical")
    for family, recs in by_family.items():
        if not recs:
            continue
        identical = all(old(r) == new(r) for r in recs)
        batch = recs * args.inner
        best_old = best_new = float("inf")
        for _ in range(args.repeat):
            best_old = min(best_old, cpu_us(old, batch))
            best_new = min(best_new, cpu_us(new, batch))
        ratio = best_old / best_new
        print(f"{family:10} {len(recs):5d} {best_old:10.1f} {best_new:9.1f} {ratio:5.2f}x  {identical}")
    print(f"\n{'family':10} {'steps':>5} {'codec us':>9} {'walk us':>8} {'plans us':>9} {'codec/walk':>10} "
          f"{'codec/plans':>11}  equal")  # fmt: skip
    for family, recs in by_family.items():
        if not recs:
            continue
        raws = [fast_codec.serialize(r) for r in recs]  # as the recorder writes them (dicts as maps)
        equal = all(_equal(fast_decode.decode(raw), _codec(raw)) for raw in raws)
        batch = raws * args.inner
        best = {"codec": float("inf"), "walk": float("inf"), "plans": float("inf")}
        for _ in range(args.repeat):
            best["codec"] = min(best["codec"], cpu_us(_codec, batch))
            best["walk"] = min(best["walk"], cpu_us(_walk, batch))
            best["plans"] = min(best["plans"], cpu_us(fast_decode.decode, batch))
        print(f"{family:10} {len(recs):5d} {best['codec']:9.1f} {best['walk']:8.1f} {best['plans']:9.1f} "
              f"{best['codec'] / best['walk']:9.2f}x {best['codec'] / best['plans']:10.2f}x  {equal}")  # fmt: skip


def _codec(raw: bytes):  # noqa: ANN202
    return codec.decode(storage_pb2.Data.FromString(raw))


def _walk(raw: bytes):  # noqa: ANN202
    return fast_decode._data(raw, 0, len(raw))  # noqa: SLF001 - the walk alone, without plans


def _equal(a, b) -> bool:  # noqa: ANN001
    """Equal values of equal types (dicts compared by key: the decoder sorts str keys)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return a == b or (a != a and b != b)


if __name__ == "__main__":
    main()
