"""Roles in a study: who may change others' work (episode owner, study creator, reviewers), reviewers, and the
study's tag palette. A mixin of `Repository` (it uses the repository's transactions and audit helper)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines.store.audit import AuditAction
from pipelines.store.errors import PermissionDenied, StoreError
from pipelines.store.models import EpisodeRow, EpisodeTagRow, StepTagRow, StudyReviewerRow, StudyRow
from protos.rlds_creator.client_pb2 import EpisodeRef

PALETTE_SIZE = 9  # labels for the digit keys 1-9


def label(value: str) -> str:
    """A tag label: trimmed, non-empty, at most 256 characters."""
    value = value.strip()
    if not value:
        raise StoreError("a tag label must not be empty")
    if len(value) > 256:
        raise StoreError(f"tag label is {len(value)} characters long; the limit is 256")
    return value


class StudyRoles:
    """Permissions, reviewers and palettes (needs `_write`, `_read`, `_study_row`, `_episode_row`, `_audit`)."""

    # -- permissions ------------------------------------------------------------------------------------------

    @staticmethod
    def _may_review(s: Session, row: EpisodeRow, user: str) -> bool:
        if user == row.user:
            return True
        creator = s.scalar(sa.select(StudyRow.creator).where(StudyRow.id == row.study_id))
        if user == creator:
            return True
        return s.get(StudyReviewerRow, (row.study_id, user)) is not None

    def _require_review(self, s: Session, row: EpisodeRow, user: str, what: str) -> None:
        """PermissionDenied unless `user` may change others' work on this episode."""
        if not self._may_review(s, row, user):
            creator = s.scalar(sa.select(StudyRow.creator).where(StudyRow.id == row.study_id))
            raise PermissionDenied(
                f"{user} may not {what} on episode {row.id!r} of {row.user}: only the episode's user, the "
                f"study's creator ({creator}) or a reviewer of study {row.study_id!r} may do that (the study's "
                f"creator adds reviewers on the Studies page)"
            )

    def can_review(self, ref: EpisodeRef, user: str) -> bool:
        """May `user` change the state of this episode and remove tags others added to it?"""
        with self._read() as s:
            return self._may_review(s, self._episode_row(s, ref), user)

    def locked_tags(self, ref: EpisodeRef, user: str) -> tuple[list[str], dict[int, list[str]]]:
        """The episode's tags `user` may not remove (episode labels; step index -> labels): none for who may
        review it (`can_review`), else those someone else (or nobody known) added, as `_remove_tag` refuses."""
        with self._read() as s:
            row = self._episode_row(s, ref)
            if self._may_review(s, row, user):
                return [], {}
            others = sa.or_(EpisodeTagRow.user.is_(None), EpisodeTagRow.user != user)
            episode = list(s.scalars(
                sa.select(EpisodeTagRow.label).where(EpisodeTagRow.episode_id == row.id, others)
                .order_by(EpisodeTagRow.id)
            ))  # fmt: skip
            steps: dict[int, list[str]] = {}
            others = sa.or_(StepTagRow.user.is_(None), StepTagRow.user != user)
            for index, label in s.execute(
                sa.select(StepTagRow.step_index, StepTagRow.label).where(StepTagRow.episode_id == row.id, others)
                .order_by(StepTagRow.step_index, StepTagRow.id)
            ):  # fmt: skip
                steps.setdefault(index, []).append(label)
            return episode, steps

    # -- tag palettes and reviewers ---------------------------------------------------------------------------

    def get_palette(self, study_id: str) -> list[str]:
        """The study's tag palette: labels for the digit keys 1..9, in order (empty when none is set)."""
        with self._read() as s:
            return list(self._study_row(s, study_id).palette or [])

    def set_palette(self, study_id: str, labels: Sequence[str], user: str) -> list[str]:
        """Replace the palette (at most 9 unique labels, tag label rules; empty clears it). The study's creator
        or a reviewer may; audited as `study.palette`."""
        cleaned = [label(value) for value in labels]
        if len(cleaned) > PALETTE_SIZE:
            raise StoreError(
                f"a tag palette holds at most {PALETTE_SIZE} labels (keys 1-9), not {len(cleaned)}"
            )
        duplicates = sorted({label for label in cleaned if cleaned.count(label) > 1})
        if duplicates:
            raise StoreError(
                f"a tag palette lists each label once: {', '.join(map(repr, duplicates))} repeated"
            )
        with self._write() as s:
            row = self._study_row(s, study_id, lock=True)
            is_reviewer = s.get(StudyReviewerRow, (study_id, user)) is not None
            if user != row.creator and not is_reviewer:
                raise PermissionDenied(
                    f"only the creator ({row.creator}) or a reviewer may edit the tag palette of study {study_id!r}"
                )
            before = list(row.palette or [])
            if before != cleaned:
                row.palette = cleaned or None
                row.updated_time = datetime.now(UTC)
                self._audit(
                    s, user, AuditAction.STUDY_PALETTE, study_id=study_id,
                    before={"labels": before}, after={"labels": cleaned},
                )  # fmt: skip
            return cleaned

    def list_reviewers(self, study_id: str) -> list[str]:
        """Users with the reviewer role in a study, sorted."""
        with self._read() as s:
            self._study_row(s, study_id)
            return list(
                s.scalars(
                    sa.select(StudyReviewerRow.user)
                    .where(StudyReviewerRow.study_id == study_id)
                    .order_by(StudyReviewerRow.user)
                ).all()
            )

    def set_reviewers(self, study_id: str, reviewers: Iterable[str], user: str) -> list[str]:
        """Replace a study's reviewers (only its creator may); audited as `study.reviewers`."""
        wanted = sorted({r.strip() for r in reviewers if r and r.strip()})
        for reviewer in wanted:
            if len(reviewer) > 320:
                raise StoreError(f"reviewer {reviewer[:40]!r}... is longer than 320 characters")
        with self._write() as s:
            row = self._study_row(s, study_id, lock=True)
            if row.creator != user:
                raise PermissionDenied(
                    f"only the creator ({row.creator}) may choose the reviewers of {study_id!r}"
                )
            current = {
                r.user: r
                for r in s.scalars(sa.select(StudyReviewerRow).where(StudyReviewerRow.study_id == study_id))
            }
            if sorted(current) == wanted:
                return wanted
            for name, reviewer in current.items():
                if name not in wanted:
                    s.delete(reviewer)
            now = datetime.now(UTC)
            for name in wanted:
                if name not in current:
                    s.add(StudyReviewerRow(study_id=study_id, user=name, added_by=user, added_time=now))
            s.flush()
            self._audit(
                s, user, AuditAction.STUDY_REVIEWERS, study_id=study_id,
                before={"reviewers": sorted(current)}, after={"reviewers": wanted},
            )  # fmt: skip
            return wanted
