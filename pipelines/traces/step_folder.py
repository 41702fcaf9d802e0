"""Step folders: one folder per episode of `<step>.xml|json` + `<step>.png|jpg`, optional `actions.jsonl` and
`episode.json`. Steps are in natural order of their names (2 before 10).

Each actions.jsonl line is validated against schemas/actions.schema.json; a line that is not JSON, breaks the
schema, names a step that does not exist or repeats a step becomes a dead letter (`bad_action`) naming the file
and line. The step itself is kept, without an action.
"""

from __future__ import annotations

from pipelines.traces import files, validation
from pipelines.traces.common import Reader, apply_manifest, decode_text, parse_json, read_failure_reason
from pipelines.traces.discover import ACTIONS, MANIFEST, hierarchy_format, natural_key, pair_screens
from pipelines.traces.model import DeadLetter, EpisodeSource, RawAction, RawEpisode, RawStep


def action_from_line(record: dict, line: str) -> RawAction:
    """A validated actions.jsonl object as a RawAction (`type` becomes kind "type")."""
    return RawAction(
        kind=record["action"],
        x=record.get("x"),
        y=record.get("y"),
        end_x=record.get("end_x"),
        end_y=record.get("end_y"),
        space=record.get("space", "screenshot"),
        text=record.get("text", ""),
        duration_ms=int(record.get("duration_ms", 0)),
        raw_json=line,
    )


def _step_lookup(stems: list[str]) -> dict[object, int]:
    lookup: dict[object, int] = {}
    for i, stem in enumerate(stems):
        lookup[stem] = i
        if stem.isdigit():
            lookup.setdefault(int(stem), i)
    return lookup


def read_actions(
    path: str, data: bytes, stems: list[str], episode_id: str
) -> tuple[dict[int, RawAction], list[DeadLetter]]:
    """Parse actions.jsonl: ({step position: action}, dead letters for every unusable line)."""
    lookup = _step_lookup(stems)
    actions: dict[int, RawAction] = {}
    first_line: dict[int, int] = {}
    dead: list[DeadLetter] = []

    def bad(lineno: int, step: int | None, message: str) -> None:
        dead.append(DeadLetter(path, step, "bad_action", f"{path} line {lineno}: {message}", episode_id))

    try:
        text = decode_text(data)
    except UnicodeDecodeError as exc:
        return {}, [DeadLetter(path, None, "bad_action", f"{path}: not UTF-8 text ({exc})", episode_id)]
    # JSON Lines end at \n only: str.splitlines() would also split inside a string holding U+2028 or \x1c.
    for lineno, line in enumerate(text.split("\n"), start=1):
        line = line.strip()
        if not line:
            continue
        try:
            record = parse_json(line)
        except ValueError as exc:
            bad(lineno, None, f"not valid JSON ({exc})")
            continue
        problem = validation.describe(validation.ACTIONS, record)
        step_ref = record.get("step") if isinstance(record, dict) else None
        position = lookup.get(step_ref) if isinstance(step_ref, int | str) else None
        if problem:
            bad(lineno, position, problem)
        elif position is None:
            bad(lineno, None, f"no step {step_ref!r} in this folder (steps: {', '.join(stems[:10])}...)")
        elif position in actions:
            bad(lineno, position, f"step {step_ref!r} already has an action (line {first_line[position]})")
        else:
            actions[position] = action_from_line(record, line)
            first_line[position] = lineno
    return actions, dead


def read(source: EpisodeSource, read_file: Reader) -> RawEpisode:
    by_name = {files.split(p)[1]: p for p in source.files}
    hierarchies, images = pair_screens(by_name)
    stems = sorted(hierarchies, key=natural_key)
    episode = RawEpisode(source=source, steps=[], num_source_steps=len(stems))
    if MANIFEST in by_name:
        apply_manifest(episode, read_file, by_name[MANIFEST])
    actions: dict[int, RawAction] = {}
    if ACTIONS in by_name:
        path = by_name[ACTIONS]
        try:
            data = read_file(path)
        except Exception as exc:
            episode.dead_letters.append(
                DeadLetter(path, None, read_failure_reason(exc), f"{path}: cannot read ({exc})", source.episode_id)
            )
            data = b""
        actions, dead = read_actions(path, data, stems, source.episode_id)
        episode.dead_letters.extend(dead)
    for i, stem in enumerate(stems):
        names = hierarchies[stem]
        shots = images.get(stem, [])
        warnings = [f"also found {n} for this step; not used" for n in names[1:] + shots[1:]]
        if not shots:
            warnings.append(f"no screenshot {stem}.png/.jpg: step has no screenshot")
        episode.steps.append(
            RawStep(
                index=i,
                name=stem,
                hierarchy_path=by_name[names[0]],
                screenshot_path=by_name[shots[0]] if shots else None,
                action=actions.get(i),
                warnings=tuple(warnings),
                hierarchy_format=hierarchy_format(names[0]),
            )
        )
    return episode
