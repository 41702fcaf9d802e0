"""Environments users play in and record: one module per family behind `base.Environment`.

Entry points: `registry.create(spec)`, `registry.valid_ids()`, `render.encode_jpeg(frame, quality)`.
"""
