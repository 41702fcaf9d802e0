"""Small Beam transforms the pipelines share."""

from __future__ import annotations

import apache_beam as beam


class OnlyType(beam.PTransform):
    """Keep elements of one type (a no-op on runners that route tagged outputs correctly)."""

    def __init__(self, cls: type) -> None:
        super().__init__(f"Only{cls.__name__}")
        self._cls = cls

    def expand(self, pcoll):
        cls = self._cls
        return pcoll | beam.Filter(lambda x: isinstance(x, cls)).with_output_types(cls)
