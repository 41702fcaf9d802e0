"""Exports run in a spawned child process, never inside the annotator's server (see below why)."""

from __future__ import annotations

import multiprocessing
import queue
from collections.abc import Callable
from typing import Any

from annotator.errors import OperationError
from pipelines.errors import StepmarkError

Progress = Callable[[float], None]

def export_in_child_process(request: Any, progress: Progress | None = None) -> Any:
    """Run `pipelines.export.export_episodes` in a spawned child process and return its ExportSummary.

    TFDS exports load TensorFlow, and TensorFlow and MuJoCo's OSMesa renderer crash when both are loaded into one
    process (measured here); the annotator's server also records Robosuite and RoboDesk episodes, so exports
    never run inside it. Progress (0-100) comes back over a queue; a failure comes back as its message.
    """
    ctx = multiprocessing.get_context("spawn")
    messages = ctx.Queue()
    child = ctx.Process(target=_export_child, args=(request, messages), name="stepmark-export", daemon=True)
    child.start()
    try:
        while True:
            try:
                kind, value = messages.get(timeout=0.5)
            except queue.Empty:
                if child.is_alive():
                    continue
                try:  # the child may have exited right after its last message
                    kind, value = messages.get(timeout=2.0)
                except queue.Empty:
                    raise OperationError(
                        f"the export process exited with code {child.exitcode} before reporting a result"
                    ) from None
            if kind == "progress":
                if progress is not None:
                    progress(value)
            elif kind == "done":
                return value
            else:
                raise OperationError(f"export failed: {value}")
    finally:
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
            child.join()


def _export_child(request: Any, messages: Any) -> None:
    from pipelines import export

    try:
        summary = export.export_episodes(request, lambda percent: messages.put(("progress", float(percent))))
    except StepmarkError as exc:
        messages.put(("error", str(exc)))
    except Exception as exc:  # reported to the page, never swallowed
        messages.put(("error", f"{type(exc).__name__}: {exc}"))
    else:
        messages.put(("done", summary))
