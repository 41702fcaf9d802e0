"""`stepmark copy`: files between any two places stepmark reads and writes (a local folder, s3://, gs://, ...),
through the same storage layer as every command: to upload traces to a bucket, or to fetch an export."""

from __future__ import annotations

import argparse
import os
import sys


def copy_command(args: argparse.Namespace) -> int:
    from pipelines import storage
    from pipelines.errors import StepmarkError

    storage.configure(args.beam_args or ())
    src, dst = storage.strip_slash(args.source), storage.strip_slash(args.destination)
    storage.check_location(src)
    storage.check_location(dst, write=True)
    found = storage.files_below(src) or storage.match(src)
    if not found:
        raise StepmarkError(f"{src}: no such file or folder, or it holds no files")
    single = len(found) == 1 and storage.strip_slash(found[0].path) == src
    pairs = []
    for meta in found:
        if not storage.is_remote(meta.path) and not os.path.isfile(meta.path):
            raise StepmarkError(f"{meta.path}: not a regular file: not copied")
        rel = storage.split(meta.path)[1] if single else meta.path[len(src) :].replace("\\", "/").lstrip("/")
        target = storage.join(dst, *rel.split("/"))
        if storage.exists(target) and not args.overwrite:
            raise StepmarkError(f"{target}: already exists (pass --overwrite to replace what is there)")
        pairs.append((meta.path, target))
    total = 0
    for source, target in pairs:
        with storage.open_read(source) as f, storage.create(target) as out:
            total += storage.copy_stream(f, out)
    print(f"copied {len(pairs)} file(s), {total:,} bytes, from {src} to {dst}", file=sys.stdout)
    return 0


def register(subparsers: argparse._SubParsersAction, parents: dict[str, argparse.ArgumentParser]) -> None:
    del parents  # no store
    p = subparsers.add_parser(
        "copy",
        help="copy files between local folders and buckets (s3://, gs://)",
        description="Copy SOURCE (a file, or every file below a folder or prefix) to DESTINATION, keeping relative "
        "paths. Either may be a local path or a bucket URL; the clients' usual environment variables (AWS_*, "
        "GOOGLE_APPLICATION_CREDENTIALS, STORAGE_EMULATOR_HOST) or Beam's --s3_*/GCP flags say how to reach it.",
    )
    p.add_argument("source", metavar="SOURCE")
    p.add_argument("destination", metavar="DESTINATION")
    p.add_argument("--overwrite", action="store_true", help="replace files that already exist at DESTINATION")
    p.add_argument("beam_args", nargs=argparse.REMAINDER, help="Beam filesystem flags, e.g. --s3_endpoint_url=...")
    p.set_defaults(func=copy_command)
