"""`stepmark study create|list|show|enable|disable` and `stepmark import-ui`: the store from the command line."""

from __future__ import annotations

import argparse
import json
import sys

from google.protobuf import json_format

from pipelines.episodes.publish import open_store
from pipelines.errors import StepmarkError
from pipelines.storage import local_path
from pipelines.store import AlreadyExists, NameTaken, Repository
from pipelines.store.spec_file import load_study_spec
from protos.rlds_creator import study_pb2


def _open(args: argparse.Namespace) -> Repository:
    return open_store(args.store, args.data)


def _state(spec: study_pb2.StudySpec) -> str:
    return study_pb2.StudySpec.State.Name(spec.state).removeprefix("STATE_").lower()


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def check_environments(spec: study_pb2.StudySpec, source: str) -> None:
    """Builds each environment once so an unknown game, robot or setting is reported now, naming the file."""
    from annotator.envs import registry

    for i, env in enumerate(spec.environment_specs):
        try:
            note = registry.check(env)
        except StepmarkError as exc:
            raise StepmarkError(f"{source}: environment_specs[{i}] (id {env.id!r}): {exc}") from exc
        if note:
            print(f"note: environment {env.id!r}: {note}", file=sys.stderr)


def study_create(args: argparse.Namespace) -> int:
    spec = load_study_spec(local_path(args.spec, "SPEC", "study create", "file"))
    if not args.no_check:
        check_environments(spec, args.spec)
    with _open(args) as repo:
        try:
            study = repo.create_study(spec, args.user)
        except NameTaken as exc:
            raise NameTaken(f"{args.spec}: field name: {exc} (study names are unique per creator)") from exc
        except AlreadyExists as exc:
            raise AlreadyExists(f"{args.spec}: field id: {exc} (remove the id for a new one)") from exc
    envs = ", ".join(env.id for env in study.environment_specs) or "none"
    print(f"created study {study.name!r} (environments: {envs}) by {args.user}")
    print(study.id)
    return 0


def study_list(args: argparse.Namespace) -> int:
    with _open(args) as repo:
        studies = repo.list_studies(creator=args.creator)
        counts = repo.episode_counts()
    if not studies:
        print("no studies")
        return 0
    rows = [["ID", "NAME", "STATE", "CREATOR", "ENVS", "EPISODES"]]
    for s in studies:
        envs = ",".join(env.id for env in s.environment_specs)
        rows.append([s.id, s.name, _state(s), s.creator.email, envs, str(counts.get(s.id, 0))])
    print(_table(rows))
    return 0


def study_show(args: argparse.Namespace) -> int:
    with _open(args) as repo:
        study = repo.get_study(args.id)
    print(json.dumps(json_format.MessageToDict(study, preserving_proto_field_name=True), indent=2))
    return 0


def _set_enabled(args: argparse.Namespace, enable: bool) -> int:
    with _open(args) as repo:
        study = repo.enable_study(args.id, enable, args.user)
    print(f"study {study.name!r} is {_state(study)}")
    print(study.id)
    return 0


def import_ui_command(args: argparse.Namespace) -> int:
    from pipelines.ui_import import import_records

    with _open(args) as repo:
        result = import_records(repo, args.output, args.study, args.user)
    print(
        f"imported {result.added} episode(s) into study {result.study.name!r}"
        f" ({result.skipped} already there)"
    )
    print(result.study.id)
    return 0


def register(subparsers: argparse._SubParsersAction, parents: dict[str, argparse.ArgumentParser]) -> None:
    store = [parents["store"]]
    study = subparsers.add_parser("study", help="create, list, show, enable or disable studies")
    sub = study.add_subparsers(dest="study_command", metavar="ACTION", required=True)

    create = sub.add_parser(
        "create",
        parents=store,
        help="create a study from a spec file",
        description="Create a study from SPEC, a StudySpec in protobuf's JSON mapping as .json or .yaml "
        "(schema: schemas/study_spec.schema.json). Each environment is built once to check its settings. "
        "Prints the new study id as the last line.",
    )
    create.add_argument("spec", metavar="SPEC", help="study spec file (.json, .yaml, .yml)")
    create.add_argument(
        "--no-check",
        action="store_true",
        help="do not build each environment to check its settings (they are then checked at recording)",
    )
    create.set_defaults(func=study_create)

    listing = sub.add_parser("list", parents=store, help="list studies")
    listing.add_argument("--creator", help="only studies created by this user")
    listing.set_defaults(func=study_list)

    show = sub.add_parser("show", parents=store, help="print a study as JSON")
    show.add_argument("id", metavar="ID")
    show.set_defaults(func=study_show)

    for name, enable in (("enable", True), ("disable", False)):
        p = sub.add_parser(name, parents=store, help=f"{name} a study (its creator only)")
        p.add_argument("id", metavar="ID")
        p.set_defaults(func=lambda args, enable=enable: _set_enabled(args, enable))

    from stepmark.cmd_fields import register_study_action

    register_study_action(sub, store)

    imp = subparsers.add_parser(
        "import-ui",
        parents=store,
        help="register convert-ui output in the store as a study",
        description="Add one episode per converted UI record (nothing is copied) to the study NAME (an id or "
        "name; created with an 'android-ui' environment if missing). Re-importing adds only new records. "
        "Prints the study id as the last line.",
    )
    imp.add_argument("output", metavar="OUTPUT", help="convert-ui output folder or one .tfrecord shard")
    imp.add_argument("--study", required=True, metavar="NAME", help="study id or name")
    imp.set_defaults(func=import_ui_command)
