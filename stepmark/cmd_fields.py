"""`stepmark study fields` and `stepmark fields import|show`: a study's own typed fields (issue 26)."""

from __future__ import annotations

import argparse
import json

from pipelines.episodes.publish import open_store
from pipelines.storage import local_path
from pipelines.store import field_values
from pipelines.store.field_defs import load_fields


def study_fields_command(args: argparse.Namespace) -> int:
    """Define the study's fields from FILE (YAML or JSON, schemas/study_fields.schema.json)."""
    fields = load_fields(local_path(args.file, "FILE", "study fields", "file"))
    with open_store(args.store, args.data) as repo:
        now = field_values.definitions(repo, args.study, include_removed=True)
        field_values.define(repo, args.study, fields, args.user)
        after = field_values.definitions(repo, args.study, include_removed=True)
    kept = {d.name for d in now if d.active} - {d.name for d in fields}
    print(f"study {args.study}: {len(fields)} field(s): {', '.join(d.name for d in fields) or 'none'}")
    if kept:
        print(f"removed (values kept, still exported): {', '.join(sorted(kept))}")
    removed = [d.name for d in after if not d.active]
    if removed and not kept:
        print(f"removed earlier (values kept): {', '.join(removed)}")
    return 0


def fields_show_command(args: argparse.Namespace) -> int:
    with open_store(args.store, args.data) as repo:
        fields = field_values.definitions(repo, args.study, include_removed=True)
        suggested = field_values.suggestion_counts(repo, args.study)
    # printed as JSON with or without --json; `suggestions`: how many each source (a model, an import) holds
    print(json.dumps({"fields": [d.to_json() | {"active": d.active, "suggestions": suggested.get(d.name, {})}
                                 for d in fields]}, indent=2))  # fmt: skip
    return 0


def fields_import_command(args: argparse.Namespace) -> int:
    path = local_path(args.file, "FILE", "fields import", "file")
    with open_store(args.store, args.data) as repo:
        result = field_values.import_values(repo, args.study, path, args.user)
    print(f"imported {result.values} value(s) and {result.suggestions} suggestion(s) into study {args.study}")
    return 0


def register_study_action(sub: argparse._SubParsersAction, store: list[argparse.ArgumentParser]) -> None:
    """`stepmark study fields` (registered by cmd_store beside the other study actions)."""
    p = sub.add_parser(
        "fields",
        parents=store,
        help="define a study's own fields from a YAML or JSON file (creator or reviewer)",
        description="Make FILE's fields the study's (schemas/study_fields.schema.json). A field left out keeps "
        "its values (readable and exported); a renamed field is a new field.",
    )
    p.add_argument("--study", required=True, metavar="ID")
    p.add_argument("file", metavar="FILE", help="fields file (.yaml, .yml, .json)")
    p.set_defaults(func=study_fields_command)


def register(subparsers: argparse._SubParsersAction, parents: dict[str, argparse.ArgumentParser]) -> None:
    store = [parents["store"]]
    f = subparsers.add_parser("fields", help="a study's own fields: import values and suggestions, show")
    sub = f.add_subparsers(dest="fields_command", metavar="ACTION", required=True)
    imp = sub.add_parser(
        "import",
        parents=store,
        help="import values (with a user) or suggestions (with a source, e.g. a model) from JSON lines",
        description='One JSON object a line: {"episode": ID or STUDY/SESSION/EPISODE, "step": N or null, "end"?: N (segments), '
        '"field": NAME, "value": V, "user": EMAIL | "source": NAME}. Any invalid line refuses the whole '
        "file (naming the line); nothing is imported then.",
    )
    imp.add_argument("--study", required=True, metavar="ID")
    imp.add_argument("file", metavar="FILE.jsonl")
    imp.set_defaults(func=fields_import_command)
    show = sub.add_parser("show", parents=store, help="print the study's fields (removed ones too) as JSON")
    show.add_argument("--study", required=True, metavar="ID")
    show.add_argument("--json", action="store_true", help="JSON (the only output; accepted for scripts)")
    show.set_defaults(func=fields_show_command)
