"""The annotator's side of a study's own fields (issue 26): the definitions as editable text (Studies page) and
the per-field agreement as tables with adjudication, and the review of suggestions (Quality page). Thin over
`pipelines.store.field_values`, `field_defs`, `field_agreement` and `field_review`; every change is made as
`ops.user`."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import yaml

from pipelines.store import field_agreement, field_values
from pipelines.store.field_agreement import FieldAgreement
from pipelines.store.field_defs import FieldDef, parse_text
from pipelines.store.field_review import SourceReview
from protos.rlds_creator import client_pb2


def fields_text(ops, study_id: str) -> str:
    """The study's fields as the YAML a fields file holds ("fields: []" when none)."""
    fields = field_values.definitions(ops.repo, study_id)
    return yaml.safe_dump({"fields": [d.to_json() for d in fields]}, sort_keys=False, allow_unicode=True)


def removed_fields(ops, study_id: str) -> list[str]:
    return [d.name for d in field_values.definitions(ops.repo, study_id, include_removed=True) if not d.active]


def save_fields(ops, study_id: str, text: str) -> list[FieldDef]:
    """Check the text as a fields file and make it the study's fields (creator or reviewer)."""
    return field_values.define(ops.repo, study_id, parse_text(text, "the fields"), ops.user)


def agreement(ops, study_id: str) -> list[FieldAgreement]:
    """Agreement per study field (the Quality page takes it from its remembered summary, `queue_ops.quality`)."""
    return field_agreement.study_field_agreement(ops.repo, study_id)


def _place(step: int, end: int) -> str:
    return "episode" if step < 0 else str(step) if step == end else f"{step}–{end}"


def _shown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value


def agreement_tables(fields: list[FieldAgreement]) -> dict[str, pd.DataFrame]:
    """The per-field table and the disputed places, as `stepmark agreement` prints them."""
    summary = pd.DataFrame(
        [{"field": f.field, "kind": f.kind, "metric": f.metric, "units": f.units, "alpha": f.alpha,
          "similarity": f.similarity, "disputed": f.disputed_count} for f in fields],
        columns=["field", "kind", "metric", "units", "alpha", "similarity", "disputed"],
    )  # fmt: skip
    disputes = pd.DataFrame(
        [{"field": f.field, "episode": d.episode_id, "step": _place(d.step, d.end),
          "values": "; ".join(f"{u}: {_shown(v)}" for u, v in d.values.items()),
          "similarity": d.similarity, "consensus": None if d.consensus is None else _shown(d.consensus)}
         for f in fields for d in f.disputed],
        columns=["field", "episode", "step", "values", "similarity", "consensus"],
    )  # fmt: skip
    return {"fields": summary, "disputes": disputes}


REVIEW_COLUMNS = ["field", "source", "suggestions", "unseen", "accepted", "edited", "replaced", "accepted rate",
                  "alpha with the source", "units", "alpha among people", "people units"]  # fmt: skip


def review_table(reviews: list[SourceReview]) -> pd.DataFrame:
    """Per field and suggestion source, what people did with the suggestions and alpha with the source as one
    more annotator (`pipelines.store.field_review`), as `stepmark agreement` prints it."""
    return pd.DataFrame(
        [[r.field, r.source, r.suggestions, r.unseen, r.accepted, r.edited, r.replaced, r.accepted_rate, r.alpha,
          r.units, r.alpha_people, r.people_units] for r in reviews],
        columns=REVIEW_COLUMNS,
    )  # fmt: skip


def adjudicate(ops, episode_id: str, field: str, step: int, end: int, value: Any) -> Any:
    """The consensus value of a field at a place (creator or reviewer)."""
    ref = ops.repo.refs_of([episode_id]).get(episode_id) or client_pb2.EpisodeRef(episode_id=episode_id)
    return field_values.adjudicate(ops.repo, ref, field, ops.user, value, step=None if step < 0 else step,
                                   end=None if step < 0 or end == step else end)  # fmt: skip
