"""The model backend contract (schemas/model_backend.md): what a backend is asked about one step and what it
answers, as dataclasses with their JSON, and the check of an answer against the study's fields.

One home for the wire format: the OpenAI adapter, the Python-callable adapter, the grounded-instructions backend
and `stepmark suggest` all build and read these types. An answer is never trusted: every value goes through
`field_defs.check_value` (the one home of what fits a field), and whatever does not fit is a problem with its
reason, which the pipeline dead-letters; nothing unchecked reaches the store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pipelines.store.field_defs import FieldDef, FieldValueError, check_value

CONTRACT = "stepmark.model_backend/1"
MAX_OBJECTS = 1000  # objects sent per step (a screen with more is cut, in object order, and says so)
MAX_TEXT = 2000  # characters of any one text sent (object texts, step texts, the goal)
MAX_IMAGE_BYTES = 8 << 20  # a larger screenshot is not sent (the request says so: `image` null, `image_bytes`)
MAX_ANSWER_ITEMS = 200
MAX_NAME = 120


class ContractError(ValueError):
    """An answer (or request) that does not follow the contract; the message is the reason, one line."""


class Unavailable(Exception):  # noqa: N818 - a state, not a mistake
    """The backend could not answer this time (asking again may help: a timeout, HTTP 5xx or 429)."""


def _cut(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[:limit]


@dataclass(frozen=True)
class StepRequest:
    """One step of one episode, as a backend sees it. `wanted`: the fields to answer (each a definition in
    `fields`); `done` places are never asked again, so `wanted` may be a subset of the study's fields."""

    study: str
    episode: str  # the store's episode id
    episode_key: str  # the converted episode's own id (UiEpisode.episode_id)
    step: int
    steps: int
    goal: str = ""
    app_package: str = ""
    screen: dict[str, Any] = field(default_factory=dict)  # width, height, image {format, base64 | url} | None
    objects: list[dict[str, Any]] = field(default_factory=list)
    objects_total: int = 0
    action: dict[str, Any] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    fields: list[dict[str, Any]] = field(default_factory=list)
    wanted: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "contract": CONTRACT, "study": self.study, "episode": self.episode, "episode_key": self.episode_key,
            "step": self.step, "steps": self.steps, "goal": self.goal, "app_package": self.app_package,
            "screen": self.screen, "objects": self.objects, "objects_total": self.objects_total,
            "action": self.action, "texts": self.texts, "fields": self.fields, "wanted": self.wanted,
            "tags": self.tags,
        }  # fmt: skip

    @staticmethod
    def from_json(data: dict[str, Any]) -> StepRequest:
        if not isinstance(data, dict) or data.get("contract") != CONTRACT:
            raise ContractError(f"not a {CONTRACT} request")
        keys = StepRequest.__dataclass_fields__
        return StepRequest(**{k: v for k, v in data.items() if k in keys})

    def definition(self, name: str) -> FieldDef:
        for d in self.fields:
            if d.get("name") == name:
                return FieldDef.from_json(d)
        raise ContractError(f"the request has no field {name!r}")

    def target(self) -> dict[str, Any] | None:
        """The object the recorded action acted on (its entry in `objects`), if any."""
        index = self.action.get("target_index")
        if isinstance(index, int) and 0 <= index < len(self.objects):
            return self.objects[index]
        return None


@dataclass(frozen=True)
class FieldAnswer:
    field: str
    value: Any
    score: float | None = None


@dataclass(frozen=True)
class Answer:
    """What a backend answered for one step. `problems`: what the backend itself could not turn into an answer
    (an unparseable reply for one field), each `(field or None, reason)`; the pipeline dead-letters them."""

    model: str
    version: str
    fields: tuple[FieldAnswer, ...] = ()
    tags: tuple[tuple[str, float | None], ...] = ()
    target: dict[str, Any] | None = None  # {"object_index": i} or {"box": [l, t, r, b]}, with "score"
    problems: tuple[tuple[str | None, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "contract": CONTRACT, "model": {"name": self.model, "version": self.version},
            "fields": [{"field": f.field, "value": f.value} | ({"score": f.score} if f.score is not None else {})
                       for f in self.fields],
        }  # fmt: skip
        if self.tags:
            out["tags"] = [{"tag": t} | ({"score": s} if s is not None else {}) for t, s in self.tags]
        if self.target is not None:
            out["target"] = self.target
        return out


def _score(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or not 0 <= value <= 1:
        raise ContractError(f"{where}: score must be a number from 0 to 1, got {value!r}")
    return float(value)


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME or any(c in value for c in "@\n"):
        raise ContractError(f"the answer's model {what} must be a short text without '@', got {value!r}")
    return value.strip()


def parse_answer(data: Any, default_model: tuple[str, str] | None = None) -> Answer:
    """An answer's JSON as an Answer (shape only: values are checked by `check_answer`). The model name and
    version may be left out when the backend declared them (`default_model`). ContractError on a bad shape."""
    if isinstance(data, Answer):
        return data
    if not isinstance(data, dict):
        raise ContractError(f"an answer is a JSON object, got {type(data).__name__}")
    if data.get("contract", CONTRACT) != CONTRACT:
        raise ContractError(f"answer for contract {data.get('contract')!r}, expected {CONTRACT!r}")
    unknown = set(data) - {"contract", "model", "fields", "tags", "target"}
    if unknown:
        raise ContractError(f"unknown answer key(s) {sorted(unknown)}")
    model = data.get("model")
    if model is None and default_model is not None:
        name, version = default_model
    elif isinstance(model, dict):
        name, version = _name(model.get("name"), "name"), _name(str(model.get("version", "")), "version")
    else:
        raise ContractError("the answer names no model ({\"model\": {\"name\": ..., \"version\": ...}})")
    items = data.get("fields") or []
    tags = data.get("tags") or []
    if not isinstance(items, list) or not isinstance(tags, list) or len(items) + len(tags) > MAX_ANSWER_ITEMS:
        raise ContractError(f"'fields' and 'tags' are lists of at most {MAX_ANSWER_ITEMS} items together")
    answers = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("field"), str) or "value" not in item:
            raise ContractError(f"fields[{i}] must be {{\"field\": NAME, \"value\": V, \"score\"?: S}}")
        answers.append(FieldAnswer(item["field"], item["value"], _score(item.get("score"), f"fields[{i}]")))
    tagged = []
    for i, item in enumerate(tags):
        if not isinstance(item, dict) or not isinstance(item.get("tag"), str) or not item["tag"].strip():
            raise ContractError(f"tags[{i}] must be {{\"tag\": TEXT, \"score\"?: S}}")
        tagged.append((item["tag"].strip(), _score(item.get("score"), f"tags[{i}]")))
    target = data.get("target")
    if target is not None and not isinstance(target, dict):
        raise ContractError("'target' must be {\"object_index\": I} or {\"box\": [l, t, r, b]}")
    return Answer(name, version, tuple(answers), tuple(tagged), target)


@dataclass(frozen=True)
class Checked:
    """An answer after the check: the values fit to store, and every problem with its field and reason."""

    values: tuple[FieldAnswer, ...]
    problems: tuple[tuple[str | None, str, str], ...]  # (field or None, reason code, detail)


def check_target(request: StepRequest, target: dict[str, Any]) -> str | None:
    """Why a target answer does not fit the step (None: it fits)."""
    if "object_index" in target:
        index = target["object_index"]
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < request.objects_total:
            return f"target object_index {index!r} is not an object of the step (0..{request.objects_total - 1})"
        return None
    box = target.get("box")
    w, h = (request.screen or {}).get("width") or 0, (request.screen or {}).get("height") or 0
    if (not isinstance(box, list) or len(box) != 4 or not all(isinstance(v, int) and not isinstance(v, bool) for v in box)
            or not (0 <= box[0] < box[2] <= w and 0 <= box[1] < box[3] <= h)):  # fmt: skip
        return f"target box {box!r} is not [left, top, right, bottom] inside the {w}x{h} screen"
    return None


def check_answer(request: StepRequest, answer: Answer, model: tuple[str, str]) -> Checked:
    """The values of `answer` that fit their fields, and a reason for everything else: an answer from another
    model than the one asked (`wrong_model`), a field not asked for (`not_asked`), a value that does not fit its
    field's kind (`bad_answer`). Tag and target answers are checked (`bad_answer` when they do not fit the
    step), then reported `not_stored`: `suggest` stores field values only (model_backend.md)."""
    problems: list[tuple[str | None, str, str]] = [(f, "bad_answer", why) for f, why in answer.problems]
    if (answer.model, answer.version) != model:
        why = f"answer from model {answer.model}@{answer.version}, expected {model[0]}@{model[1]}"
        return Checked((), (*problems, (None, "wrong_model", why)))
    values: list[FieldAnswer] = []
    seen: set[str] = set()
    for item in answer.fields:
        if item.field not in request.wanted:
            why = f"field {item.field!r} was not asked for (asked: {', '.join(request.wanted)})"
            problems.append((item.field, "not_asked", why))
            continue
        if item.field in seen:
            problems.append((item.field, "bad_answer", f"field {item.field!r} answered twice"))
            continue
        seen.add(item.field)
        try:
            value = check_value(request.definition(item.field), item.value)
        except FieldValueError as exc:
            problems.append((item.field, "bad_answer", str(exc)))
            continue
        values.append(FieldAnswer(item.field, value, item.score))
    for tag, _ in answer.tags:
        problems.append((None, "not_stored", f"step tag {tag!r} answered: suggest checks tags but stores none yet"))
    if answer.target is not None:
        wrong = check_target(request, answer.target)
        problems.append((None, "bad_answer", wrong) if wrong else
                        (None, "not_stored", f"target {answer.target} answered: suggest checks targets and boxes "
                                             "but stores none yet"))  # fmt: skip
    return Checked(tuple(values), tuple(problems))
