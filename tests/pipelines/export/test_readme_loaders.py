"""Every code block of "Loading an export" (docs/exports.md, linked from the README) runs as printed (only
the paths substituted) against real exports: Procgen episodes recorded with the random policy and one recorded from key presses (a varying
number of keys per step), NetHack, and UI episodes converted from ../shared/fixtures; with and without
`--split` (a split no episode hashed into included). A block that needs a flag for some kind of data says so
in its first line's comment (Minari: UI needs `--ui-objects padded:N`), and the export here uses it.

Each block runs in a fresh Python process (TensorFlow and MuJoCo's OSMesa must not share one); a few lines
appended after it print what it loaded, which the test checks against the export. The envlogger and TFDS blocks
import TensorFlow: they carry the `tfds` marker (their own pytest process, as scripts/test.sh runs them)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipelines import export
from pipelines.exporters.splits import parse_splits
from pipelines.store import open_store
from protos.rlds_creator import client_pb2
from tests.conftest import REPO_ROOT
from tests.pipelines.export.export_data import ALICE, PROCGEN_ENV, ExportData, copy_data

SPLITS = "train=0.6,val=0.2,test=0.2"
# Keys per step of the recorded episode: none, one, two (a varying number, as people press them).
KEY_PRESSES = [["ArrowRight"], [], ["ArrowRight", "ArrowUp"], ["ArrowUp"], ["ArrowLeft", "ArrowDown"]]

# What each block's variables show, printed as one JSON line after the block.
EPILOGUES = {
    "envlogger": 'print("RESULT " + __import__("json").dumps({"split_names": meta["split_names"], '
    '"episodes": len(episodes), "r": float(stats["r"]), "pairs": len(pairs), "records": len(steps), '
    '"pair_actions": sum(a is not None for _, a in pairs)}))',
    "tfds": 'print("RESULT " + __import__("json").dumps({"split_names": info["split_names"], '
    '"splits": sorted(builder.info.splits), "space": str(action_space), "batch": int(len(batch["is_last"])), '
    '"keys": [[k.decode() for k in row] for row in batch["keys"].to_list()] if "keys" in batch else None, '
    '"bc_steps": sum(len(b["is_last"]) for b in tfds.as_numpy(transitions)), '
    '"bc_last": any(bool(b["is_last"].any()) for b in tfds.as_numpy(transitions)), '
    '"all_steps": sum(len(b["is_last"]) for b in tfds.as_numpy(steps)), "episodes_in_train": builder.info.splits["train"].num_examples}))',
    "parquet": 'print("RESULT " + __import__("json").dumps({"split_names": info["split_names"], '
    '"hf_splits": sorted(ds), "rows": len(df), "finals": len(finals), "first_is_first": bool(first["is_first"]), '
    '"bc_rows": len(transitions), "bc_last": bool(transitions.is_last.any())}))',
    "minari": 'print("RESULT " + __import__("json").dumps({"split_names": info["split_names"], '
    '"splits": {k: list(v) for k, v in splits.items()}, "train": int(train.total_episodes), '
    '"episodes": int(ds.total_episodes), "ret": float(ret), "n": int(n), "actions": int(len(ep.rewards)), '
    '"observations": int(ep.infos["episode"]["r"].shape[0])}))',
}


def loading_blocks() -> dict[str, str]:
    """The "Loading an export" code blocks (docs/exports.md) by the format their first line names."""
    section = (REPO_ROOT / "docs" / "exports.md").read_text(encoding="utf-8")
    blocks = {}
    for block in re.findall(r"```python\n(.*?)```", section, re.S):
        fmt = re.search(r"# --format (\w+)", block.splitlines()[0])
        assert fmt, f"a block without '# --format NAME' on its first line: {block.splitlines()[0]!r}"
        blocks[fmt.group(1)] = block
    assert sorted(blocks) == sorted(export.FORMATS)
    return blocks


def run_block(fmt: str, out: Path, tmp: Path) -> dict[str, Any]:
    """Runs the docs block as printed, its paths replaced by `out`'s; returns what the epilogue printed."""
    code = loading_blocks()[fmt]
    code = code.replace('"DIR"', json.dumps(str(out.parent))).replace('"NAME-v0"', json.dumps(out.name))
    code = code.replace('"OUT', '"' + str(out))
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), HF_HOME=str(tmp / "hf"), HF_DATASETS_OFFLINE="1",
               TF_CPP_MIN_LOG_LEVEL="3")  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", code + "\n" + EPILOGUES[fmt]], cwd=tmp, env=env, capture_output=True, text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"docs/exports.md {fmt} block failed on {out}:\n{done.stderr[-3000:]}"
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def split_seed(ids: list[str], must_train: list[str]) -> int:
    """A `--split-seed` for SPLITS under which `must_train` land in train and `test` gets no episode (an empty
    split, which must still exist in every format); with several episodes, `val` gets one."""
    for seed in range(10_000):
        spec = parse_splits(SPLITS, seed)
        got = [spec.split_of(i) for i in ids]
        if "test" in got or any(spec.split_of(i) != "train" for i in must_train):
            continue
        if len(ids) > 1 and "val" not in got:
            continue
        return seed
    raise AssertionError("no seed found")


@pytest.fixture(scope="module")
def loader_data(export_data: ExportData, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The export data plus one Procgen episode recorded from key presses through the recorder."""
    from annotator.recorder import Recorder

    data_dir = copy_data(export_data, tmp_path_factory.mktemp("readme") / "data")
    with open_store(None, data_dir) as repo, Recorder(repo, data_dir, export_data.study_id, PROCGEN_ENV, ALICE,
                                                      seed=21) as rec:  # fmt: skip
        rec.start()
        for i in range(200):
            if isinstance(rec.act(KEY_PRESSES[i % len(KEY_PRESSES)]), client_pb2.ConfirmSaveResponse):
                break
        saved = rec.save(client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=True)).episode.episode
        pressed = repo.get_episode(
            client_pb2.EpisodeRef(study_id=saved.study_id, session_id=saved.session_id, episode_id=saved.id)
        )
    procgen = [*export_data.procgen, pressed]
    return {
        "data_dir": data_dir,
        "procgen": [export_data.ref(e) for e in procgen],
        "procgen_ids": [e.id for e in procgen],
        "pressed": pressed.id,
        "nethack": [export_data.ref(e) for e in export_data.nethack],
        "nethack_ids": [e.id for e in export_data.nethack],
        "ui_study": export_data.ui_study_id,
        "ui_ids": [e.id for e in export_data.ui],
        "ui_first": export_data.ui[0].id,
    }


# (kind, with --split): Procgen and UI both ways, NetHack with --split.
CASES = [("procgen", False), ("procgen", True), ("nethack", True), ("ui", False), ("ui", True)]


def _export(data: dict[str, Any], kind: str, split: bool, fmt: str, root: Path) -> tuple[Path, list[str]]:
    """One export of `kind` in `fmt`; returns its folder and its split names."""
    kw: dict[str, Any] = {}
    if kind == "ui":
        kw["study_id"] = data["ui_study"]
        if fmt == "minari":  # the block's comment: UI needs --ui-objects padded:N
            kw["ui_objects"] = "padded:64"
        ids, must = data["ui_ids"], [data["ui_first"]]
    else:
        kw["refs"] = data[kind]
        ids = data[f"{kind}_ids"]
        must = [data["pressed"]] if kind == "procgen" else ids[:1]
    names = ["train"]
    if split:
        kw.update(splits=SPLITS, split_seed=split_seed(ids, must))
        names = ["train", "val", "test"]
    out = root / f"{kind}-{'split' if split else 'all'}" / f"{kind}-v0"
    out.parent.mkdir(parents=True)
    export.export_episodes(export.ExportRequest(data_dir=str(data["data_dir"]), out=str(out), format=fmt, **kw))
    return out, names


def _check(fmt: str, kind: str, result: dict[str, Any], names: list[str]) -> None:
    assert result["split_names"] == names
    if fmt == "envlogger":
        assert result["episodes"] >= 1
        # the BC pairs: one per transition, each with an action (records - 1)
        assert result["pairs"] == result["pair_actions"] == result["records"] - 1 >= 1
    elif fmt == "tfds":
        assert result["splits"] == sorted(names)  # empty splits listed too
        assert result["space"].startswith("Discrete" if kind != "ui" else "Dict") and result["batch"] >= 2
        # the BC view: every step but each episode's final one
        assert not result["bc_last"] and result["bc_steps"] == result["all_steps"] - result["episodes_in_train"]
        if kind == "procgen":  # the key-press episode is in train: a varying number of keys per step
            assert {len(k) for k in result["keys"]} >= {0, 1}
    elif fmt == "parquet":
        assert result["rows"] >= 2 and result["finals"] >= 1 and result["first_is_first"]
        assert not result["bc_last"] and result["bc_rows"] == result["rows"] - result["finals"] >= 1
        assert "train" in result["hf_splits"] and set(result["hf_splits"]) <= set(names)  # names kept as given
    elif fmt == "minari":
        assert sorted(result["splits"]) == sorted(names) and result["train"] == len(result["splits"]["train"]) >= 1
        assert result["episodes"] == sum(len(v) for v in result["splits"].values())
        assert result["n"] == result["actions"] == result["observations"] - 1 >= 1  # N transitions, N+1 obs
        if "test" in result["splits"]:
            assert result["splits"]["test"] == []


@pytest.mark.parametrize("fmt", ["parquet", "minari"])
def test_readme_blocks_load_every_kind_of_export(loader_data: dict[str, Any], tmp_path: Path, fmt: str) -> None:
    for kind, split in CASES:
        out, names = _export(loader_data, kind, split, fmt, tmp_path)
        _check(fmt, kind, run_block(fmt, out, tmp_path), names)


@pytest.mark.tfds
@pytest.mark.parametrize("fmt", ["envlogger", "tfds"])
def test_readme_tensorflow_blocks_load_every_kind_of_export(
    loader_data: dict[str, Any], tmp_path: Path, fmt: str
) -> None:
    for kind, split in CASES:
        out, names = _export(loader_data, kind, split, fmt, tmp_path)
        _check(fmt, kind, run_block(fmt, out, tmp_path), names)
