"""A Python callable as a model backend: `python:package.module:function`, called with a `StepRequest`; it
returns an `Answer` or the answer's JSON (schemas/model_backend.md). Its name and version are `--model
NAME@VERSION`, else the callable's `model_name` / `model_version` attributes, else its dotted path and
"unversioned"."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from pipelines.errors import StepmarkError
from pipelines.models.contract import Answer, ContractError, StepRequest, parse_answer


def load_callable(target: str) -> Callable[[StepRequest], Any]:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise StepmarkError(f"python:{target}: expected python:package.module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise StepmarkError(f"python:{target}: cannot import {module_name}: {exc}") from None
    function = getattr(module, attribute, None)
    if not callable(function):
        raise StepmarkError(f"python:{target}: {module_name} has no callable {attribute!r}")
    return function


class PythonBackend:
    def __init__(self, target: str, name: str | None = None, version: str | None = None) -> None:
        self.function = load_callable(target)
        self.name = name or getattr(self.function, "model_name", None) or target.replace(":", ".")
        self.version = version or getattr(self.function, "model_version", None) or "unversioned"

    def answer(self, request: StepRequest, timeout: float) -> Answer:
        del timeout  # a callable runs in the worker; the pipeline bounds it by --in-flight only
        try:
            result = self.function(request)
        except ContractError:
            raise
        except Exception as exc:  # noqa: BLE001 - the callable's failure is this step's dead letter
            raise ContractError(f"the callable raised {type(exc).__name__}: {exc}") from None
        return parse_answer(result.to_json() if isinstance(result, Answer) else result, (self.name, self.version))

    def close(self) -> None:
        pass
