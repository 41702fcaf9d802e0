"""`--split train=0.8,val=0.1,test=0.1 [--split-seed S]`: episodes into splits by a hash of their id.

An episode's split depends only on its id, the seed and the fractions, so adding episodes to a selection
never moves an exported episode to another split. The hash: the first 8 bytes of
`sha256(f"{seed}:{episode_id}")` as a number in [0, 1); the episode goes to the first split whose cumulative
fraction exceeds it (splits in the order given). Pure functions.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass

from pipelines.errors import StepmarkError

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
MAX_SPLITS = 16
# Split names the consumers' libraries reserve: `all` is the union of every split in Hugging Face `datasets`
# (which refuses it as a split of its own) and in TFDS (`as_dataset(split="all")`).
RESERVED = frozenset({"all"})


@dataclass(frozen=True)
class SplitSpec:
    names: tuple[str, ...]
    fractions: tuple[float, ...]
    seed: int = 0

    def split_of(self, episode_id: str) -> str:
        digest = hashlib.sha256(f"{self.seed}:{episode_id}".encode()).digest()
        u = int.from_bytes(digest[:8], "big") / 2**64
        total = 0.0
        for name, fraction in zip(self.names, self.fractions, strict=True):
            total += fraction
            if u < total:
                return name
        return self.names[-1]  # rounding of the fractions' sum

    def to_dict(self) -> dict[str, object]:
        return {
            "fractions": dict(zip(self.names, self.fractions, strict=True)),
            "seed": self.seed,
            "hash": "sha256('<seed>:<episode_id>')[:8] / 2**64 against cumulative fractions",
        }


def parse_splits(text: str, seed: int = 0) -> SplitSpec:
    """`train=0.8,val=0.1,test=0.1` -> SplitSpec; a clear error for anything else (fractions must sum to 1)."""
    names: list[str] = []
    fractions: list[float] = []
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or len(parts) > MAX_SPLITS:
        raise StepmarkError(f"--split {text!r}: give 1 to {MAX_SPLITS} NAME=FRACTION pairs, e.g. train=0.8,val=0.2")
    for part in parts:
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not _NAME.match(name):
            raise StepmarkError(
                f"--split {text!r}: {part!r} is not NAME=FRACTION (names: lowercase letters, digits, _)"
            )
        if name in RESERVED:
            raise StepmarkError(
                f"--split {text!r}: {name!r} is reserved (Hugging Face datasets and TFDS read it as every split "
                "together); choose another name"
            )
        if name in names:
            raise StepmarkError(f"--split {text!r}: split {name!r} given twice")
        try:
            fraction = float(value)
        except ValueError:
            raise StepmarkError(f"--split {text!r}: {value!r} is not a number") from None
        if not math.isfinite(fraction) or not 0.0 < fraction <= 1.0:
            raise StepmarkError(f"--split {text!r}: fraction of {name!r} must be in (0, 1]")
        names.append(name)
        fractions.append(fraction)
    if abs(sum(fractions) - 1.0) > 1e-6:
        raise StepmarkError(f"--split {text!r}: the fractions add up to {sum(fractions):g}, not 1")
    if seed < 0 or seed >= 2**63:
        raise StepmarkError(f"--split-seed {seed}: must be in [0, 2**63)")
    return SplitSpec(names=tuple(names), fractions=tuple(fractions), seed=seed)


def split_names(spec: SplitSpec | None) -> tuple[str, ...]:
    """Every split a dataset has, in the order given: the `--split` names (each one listed in every format,
    even when no episode hashed into it), or the one split `train` without `--split`."""
    return spec.names if spec is not None else ("train",)
