"""An OpenAI-compatible chat-completions endpoint (vLLM, TGI, Ollama, hosted APIs) as a model backend.

One chat request per asked field: the field's prompt (its `prompt:` in the study's fields file, else
`DEFAULT_PROMPTS` by kind) with `{options}`, `{guideline}`, `{goal}`, `{step_text}`, `{action}`, ... filled in
(`field_defs.PROMPT_PLACEHOLDERS`), and the step's screenshot as an `image_url` data URL. The reply's text is read as the field's
kind (`parse_reply`); a reply that is no value of the field is a problem of that field (a dead letter with the
reason), never a value. The API key, if the endpoint needs one, is read from OPENAI_API_KEY.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from typing import Any

from pipelines.models.contract import Answer, ContractError, FieldAnswer, StepRequest, Unavailable
from pipelines.models.grounded_instructions import instruction, label
from pipelines.store.field_defs import FieldDef

MAX_REPLY_BYTES = 1 << 20
MAX_TOKENS = 300
SYSTEM = ("You annotate one step of a recorded Android app session for a dataset. Answer only with what is "
          "asked, with no explanation.")  # fmt: skip
_CONTEXT = "Goal of the session: {goal}\nAction: {action}\nStep texts: {step_text}\nField {field}: {guideline}\n"
DEFAULT_PROMPTS = {
    "choice": _CONTEXT + "Answer with exactly one of: {options}.",
    "multi_choice": _CONTEXT + "Answer with a JSON list of any of: {options}.",
    "boolean": _CONTEXT + "Answer with true or false.",
    "number": _CONTEXT + "Answer with a number.",
    "text": _CONTEXT + "Answer with the text only.",
}


def chat_url(url: str) -> str:
    url = url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    return url + ("/chat/completions" if url.endswith("/v1") else "/v1/chat/completions")


def placeholders(request: StepRequest, definition: FieldDef) -> dict[str, str]:
    texts = "; ".join(f"{k}: {v}" for k, v in request.texts.items() if v) or "none"
    return {
        "field": definition.name, "kind": definition.kind,
        "options": ", ".join(json.dumps(o, ensure_ascii=False) for o in definition.options),
        "guideline": definition.guideline or "(no guideline)", "goal": request.goal or "(not recorded)",
        "step_text": texts, "action": instruction(request) or "no action recorded",
        "target": label(request.target()) or "(none)", "app": request.app_package or "(unknown)",
        "step": str(request.step), "steps": str(request.steps),
    }  # fmt: skip


def prompt_of(request: StepRequest, definition: FieldDef) -> str:
    template = definition.prompt or DEFAULT_PROMPTS[definition.kind]
    return template.format_map(placeholders(request, definition))


_FENCE = re.compile(r"^```[a-z]*\s*(.*?)\s*```$", re.S)


def _option(definition: FieldDef, text: str) -> str:
    text = text.strip().strip("'\"").strip()
    if text in definition.options:
        return text
    folded = [o for o in definition.options if o.casefold() == text.casefold()]
    if len(folded) == 1:
        return folded[0]
    raise ContractError(f"field {definition.name}: the reply {text[:80]!r} is not one of its options "
                        f"{list(definition.options)}")  # fmt: skip


def parse_reply(definition: FieldDef, reply: str) -> Any:
    """The reply's text as a value of the field's kind (checked against the field afterwards); ContractError
    with the reason when it reads as none."""
    text = reply.strip()
    fenced = _FENCE.match(text)
    text = fenced.group(1) if fenced else text
    try:
        decoded: Any = json.loads(text)
    except ValueError:
        decoded = None
    kind = definition.kind
    if kind == "choice":
        return _option(definition, decoded if isinstance(decoded, str) else text)
    if kind == "multi_choice":
        items = decoded if isinstance(decoded, list) else [p for p in text.strip("[]").split(",") if p.strip()]
        return [_option(definition, str(i)) for i in items]
    if kind == "boolean":
        word = text.strip().strip(".").casefold()
        if word in ("true", "yes"):
            return True
        if word in ("false", "no"):
            return False
        raise ContractError(f"field {definition.name}: the reply {text[:80]!r} is not true or false")
    if kind == "number":
        if isinstance(decoded, int | float) and not isinstance(decoded, bool):
            return decoded
        raise ContractError(f"field {definition.name}: the reply {text[:80]!r} is not a number")
    return decoded if isinstance(decoded, str) else text.strip().strip('"')


class OpenAIBackend:
    def __init__(self, url: str, name: str, version: str) -> None:
        self.url, self.name, self.version = chat_url(url), name, version
        self.key = os.environ.get("OPENAI_API_KEY", "")

    def body(self, request: StepRequest, definition: FieldDef) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": prompt_of(request, definition)}]
        image = (request.screen or {}).get("image")
        if image and image.get("base64"):
            content.append({"type": "image_url",
                            "image_url": {"url": f"data:{image['media_type']};base64,{image['base64']}"}})  # fmt: skip
        return {"model": self.name, "temperature": 0, "max_tokens": MAX_TOKENS,
                "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}]}  # fmt: skip

    def _post(self, body: dict[str, Any], timeout: float) -> str:
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        req = urllib.request.Request(self.url, json.dumps(body).encode("utf-8"), headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as response:  # noqa: S310 - the URL the user gave
                data = response.read(MAX_REPLY_BYTES + 1)
        except urllib.error.HTTPError as exc:
            detail = exc.read(300).decode("utf-8", "replace")
            if exc.code >= 500 or exc.code == 429:
                raise Unavailable(f"{self.url}: HTTP {exc.code}: {detail}") from None
            raise ContractError(f"{self.url}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            raise Unavailable(f"{self.url}: {getattr(exc, 'reason', exc)}") from None
        if len(data) > MAX_REPLY_BYTES:
            raise ContractError(f"{self.url}: reply larger than {MAX_REPLY_BYTES} bytes")
        try:
            reply = json.loads(data)
            content = reply["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ContractError(f"{self.url}: not a chat-completions reply: {data[:200]!r}") from None
        if not isinstance(content, str):
            raise ContractError(f"{self.url}: the reply's message has no text content")
        return content

    def answer(self, request: StepRequest, timeout: float) -> Answer:
        values, problems = [], []
        for name in request.wanted:
            definition = request.definition(name)
            try:  # a refused request or a bad reply is this field's problem: the fields answered are kept
                reply = self._post(self.body(request, definition), timeout)
                values.append(FieldAnswer(name, parse_reply(definition, reply)))
            except ContractError as exc:
                problems.append((name, str(exc)))
        return Answer(self.name, self.version, tuple(values), problems=tuple(problems))

    def close(self) -> None:
        pass
