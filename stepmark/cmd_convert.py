"""`stepmark convert-ui` (UI traces -> TFRecord of UiEpisode) and `stepmark inspect` (look at the result)."""

from __future__ import annotations

import argparse
import base64
import json
from collections import Counter

from google.protobuf import json_format

from pipelines import convert, ui_records
from pipelines.errors import StepmarkError
from pipelines.hierarchy import targets
from pipelines.step_text import step_texts
from pipelines.traces.files import display
from protos.stepmark import ui_episode_pb2

_A = ui_episode_pb2.Action
#: Actions that point at the screen: `inspect` counts how their targets resolved.
POINTED_TYPES = (_A.TAP, _A.LONG_PRESS, _A.SWIPE, _A.TYPE_TEXT)


def register(subparsers: argparse._SubParsersAction, parents: dict[str, argparse.ArgumentParser]) -> None:
    del parents  # neither command touches the store
    p = subparsers.add_parser(
        "convert-ui",
        help="convert Android UI traces into TFRecord shards of UiEpisode",
        description="Convert Android UI traces under INPUT (Rico trace folders, step folders with "
        "actions.jsonl, single screens, DroidBot output folders; see schemas/layouts.md) into OUTPUT/"
        "episodes-SSSSS-of-NNNNN.tfrecord, dead_letters.jsonl and summary.json. Any further flags go to "
        "Apache Beam (default --runner=FnApiRunner).",
    )
    convert.add_arguments(p)
    p.add_argument("beam_args", nargs=argparse.REMAINDER, help="Beam pipeline flags, e.g. --runner=...")
    p.set_defaults(func=run_convert)

    q = subparsers.add_parser(
        "inspect",
        help="summarize a convert-ui output folder or shard, or dump one episode",
        description="Without --episode: counts of episodes, steps, objects, layouts and dead letters. "
        "With --episode: that episode step by step (or as JSON with --json).",
    )
    q.add_argument("file", metavar="FILE", help="convert-ui output folder or one .tfrecord shard")
    q.add_argument("--episode", metavar="ID", help="episode id to show")
    q.add_argument("--step", type=int, metavar="N", help="only this step of the episode (0-based)")
    q.add_argument("--json", action="store_true", help="print JSON")
    q.add_argument(
        "--bytes", action="store_true", help="include screenshot and hierarchy bytes (base64) in JSON dumps"
    )
    q.set_defaults(func=run_inspect)


def run_convert(args: argparse.Namespace) -> int:
    argv = [args.input, args.output, "--shards", str(args.shards)]
    argv += (
        ["--drop-invisible"] * args.drop_invisible
        + ["--overwrite"] * args.overwrite
        + ["--quiet"] * args.quiet
        + ["--follow-links"] * args.follow_links
        + ["--episode-timeout", repr(args.episode_timeout)]
    )
    return convert.run(argv + list(args.beam_args))


# ----------------------------------------------------------------------------------------------------------
# inspect


def folder_summary(path: str) -> dict:
    """Counts over every record under `path` (read one at a time), plus dead letters for an output folder."""
    layouts: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    actions: Counter[str] = Counter()
    resolution: dict[str, Counter[str]] = {}
    episodes = steps = objects = targeted = with_screenshot = 0
    shards = ui_records.shard_paths(path)
    for e in ui_records.iter_episodes(path):
        episodes += 1
        layouts[e.source] += 1
        packages[e.app_package or "(unknown)"] += 1
        for ts, action in zip(e.episode.time_steps, e.actions, strict=False):
            steps += 1
            objects += len(ts.observation.objects)
            with_screenshot += bool(ts.observation.screenshot)
            actions[ui_episode_pb2.Action.Type.Name(action.type)] += 1
            targeted += action.HasField("target_index")
            if action.type in POINTED_TYPES:
                index = action.target_index if action.HasField("target_index") else None
                resolution.setdefault(e.source, Counter())[targets.outcome(ts.observation.objects, index)] += 1
    out = {
        "path": path,
        "shards": len(shards),
        "episodes": episodes,
        "steps": steps,
        "objects": objects,
        "steps_with_screenshot": with_screenshot,
        "actions": dict(actions.most_common()),
        "actions_with_target": targeted,
        "target_resolution": {
            source: {k: counts[k] for k in targets.OUTCOMES} for source, counts in sorted(resolution.items())
        },
        "episodes_by_layout": dict(layouts.most_common()),
        "app_packages": dict(packages.most_common(10)),
    }
    if ui_records.is_output_folder(path):
        reasons = Counter(d.reason for d in ui_records.read_dead_letters(path))
        out["dead_letters"] = sum(reasons.values())
        out["dead_letters_by_reason"] = dict(reasons.most_common())
    return out


def format_summary(s: dict) -> str:
    def counts(d: dict) -> str:
        return ", ".join(f"{k} {v}" for k, v in d.items()) or "none"

    lines = [
        f"{display(s['path'])}: {s['episodes']} episodes in {s['shards']} shard(s)",
        f"  steps: {s['steps']} ({s['steps_with_screenshot']} with a screenshot), objects: {s['objects']}",
        f"  layouts: {counts(s['episodes_by_layout'])}",
        f"  actions: {counts(s['actions'])} ({s['actions_with_target']} resolved to an object)",
        f"  apps: {counts(s['app_packages'])}",
    ]
    for source, outcome in s["target_resolution"].items():
        total = sum(outcome.values())
        parts = ", ".join(f"{k.replace('_', '-')} {v} ({v / total:.0%})" for k, v in outcome.items())
        lines.append(f"  targets of pointed actions, {source}: {parts}")
    if "dead_letters" in s:
        lines.append(f"  dead letters: {s['dead_letters']} ({counts(s['dead_letters_by_reason'])})")
    return "\n".join(lines)


def _elide(obs: dict) -> None:
    """Replace base64 blobs (screenshot, hierarchy) with their size."""
    for key in ("screenshot", "xml", "json"):
        if key in obs:
            obs[key] = {"bytes": len(base64.b64decode(obs[key]))}


def episode_json(e: ui_episode_pb2.UiEpisode, step: int | None, include_bytes: bool) -> dict:
    d = json_format.MessageToDict(e, preserving_proto_field_name=True)
    time_steps = d.get("episode", {}).get("time_steps", [])
    for i, ts in enumerate(time_steps):
        obs = ts.get("observation", {})
        if not include_bytes:
            _elide(obs)
            if "screenshot" in obs:
                obs["screenshot"]["format"] = e.step_info[i].screenshot_format
    if step is not None:
        if not 0 <= step < len(e.episode.time_steps):
            raise StepmarkError(
                f"episode {e.episode_id!r} has steps 0..{len(e.episode.time_steps) - 1}, not {step}"
            )
        return {
            "episode_id": e.episode_id,
            "step": step,
            "time_step": time_steps[step],
            "action": d.get("actions", [{}] * len(time_steps))[step],
            "step_info": d.get("step_info", [{}] * len(time_steps))[step],
        }
    return d


def _describe_action(e: ui_episode_pb2.UiEpisode, i: int) -> str:
    a = e.actions[i]
    kind = ui_episode_pb2.Action.Type.Name(a.type)
    if a.type == ui_episode_pb2.Action.ACTION_UNSPECIFIED:
        return "no action"
    text = kind
    if a.type in (a.TAP, a.LONG_PRESS, a.SWIPE) or a.HasField("target_index"):
        text += f" ({a.x},{a.y})"
    if a.type == a.SWIPE:
        text += f"->({a.end_x},{a.end_y})"
    if a.text:
        text += f" {a.text!r}"
    if a.HasField("target_index"):
        o = e.episode.time_steps[i].observation.objects[a.target_index]
        label = o.text or o.content_desc or o.resource_id.rsplit("/", 1)[-1]
        text += f" -> object {a.target_index} {o.android_class.rsplit('.', 1)[-1]}"
        text += f" {label!r}" if label else ""
    return text


def format_episode(e: ui_episode_pb2.UiEpisode, step: int | None) -> str:
    lines = [
        f"episode {e.episode_id} ({e.source}) from {e.source_path}",
        f"  app: {e.app_package or '(unknown)'}; steps: {len(e.episode.time_steps)}"
        + (f"; goal: {e.goal}" if e.goal else ""),
    ]
    for k, v in sorted(e.metadata.items()):
        lines.append(f"  {k}: {v}")
    indices = range(len(e.episode.time_steps)) if step is None else [step]
    for i in indices:
        if not 0 <= i < len(e.episode.time_steps):
            raise StepmarkError(
                f"episode {e.episode_id!r} has steps 0..{len(e.episode.time_steps) - 1}, not {i}"
            )
        obs, info = e.episode.time_steps[i].observation, e.step_info[i]
        shot = f"{info.screenshot_format} {len(obs.screenshot)} B" if obs.screenshot else "no screenshot"
        lines.append(
            f"  step {i} (source step {info.index}): {len(obs.objects)} objects, "
            f"{obs.screen_width}x{obs.screen_height}, {info.hierarchy_format}, {shot}; {_describe_action(e, i)}"
        )
        for name, text in step_texts(e, i).items():  # instruction, chain-of-action-thought: named step texts
            if text:
                lines.append(f"      {name}: {text}")
        for w in info.warnings:
            lines.append(f"      warning: {w}")
    return "\n".join(lines)


def run_inspect(args: argparse.Namespace) -> int:
    if args.episode is None:
        if args.step is not None:
            raise StepmarkError("--step needs --episode")
        summary = folder_summary(args.file)
        print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
        return 0
    episode = ui_records.find_episode(args.file, args.episode)
    if args.json:
        print(json.dumps(episode_json(episode, args.step, args.bytes), indent=2, ensure_ascii=False))
    else:
        print(format_episode(episode, args.step))
    return 0
