"""Model backends behind one small interface, chosen by a spec string (schemas/model_backend.md):

- `openai:URL` — any OpenAI-compatible chat-completions endpoint with image input (vLLM, TGI, Ollama, hosted
  APIs); one prompt per field (`openai_backend.py`);
- `python:package.module:function` — a Python callable taking a `StepRequest` and returning an `Answer` or its
  JSON (`python_backend.py`);
- `grounded-instructions` — the weight-free backend of `grounded_instructions.py` (a Python callable).

A backend raises `contract.Unavailable` when asking again may help (a timeout, a refused connection, HTTP 5xx or 429)
and `ContractError` when it will not (a reply that is no answer); `stepmark suggest` retries the first and
dead-letters the second.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pipelines.errors import StepmarkError
from pipelines.models.contract import Answer, StepRequest

ALIASES = {"grounded-instructions": "python:pipelines.models.grounded_instructions:suggest"}
UNVERSIONED = "unversioned"


class Backend(Protocol):
    name: str
    version: str

    def answer(self, request: StepRequest, timeout: float) -> Answer: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Model:
    """Who answers: the model's name and version; its suggestions are stored under `author`."""

    name: str
    version: str

    @property
    def author(self) -> str:
        return f"model:{self.name}@{self.version}"


def split_model(text: str | None) -> tuple[str | None, str | None]:
    """`NAME` or `NAME@VERSION` (as `--model` takes it)."""
    if not text:
        return None, None
    name, _, version = text.partition("@")
    return name.strip() or None, version.strip() or None


def backend_from_spec(spec: str, model: str | None = None) -> Backend:
    """The backend a `--backend` spec names; StepmarkError naming the spec when it names none."""
    spec = ALIASES.get(spec, spec)
    kind, _, rest = spec.partition(":")
    name, version = split_model(model)
    if kind == "openai" and rest:
        from pipelines.models.openai_backend import OpenAIBackend

        if not name:
            raise StepmarkError(f"--backend {spec}: give the served model's name with --model NAME[@VERSION]")
        return OpenAIBackend(rest, name, version or UNVERSIONED)
    if kind == "python" and rest:
        from pipelines.models.python_backend import PythonBackend

        return PythonBackend(rest, name, version)
    raise StepmarkError(
        f"--backend {spec!r}: expected openai:URL, python:package.module:function or one of {', '.join(ALIASES)}"
    )
