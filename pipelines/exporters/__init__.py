"""Export building blocks: episode selection, per-episode transforms (the step contract), the envlogger,
TFDS and Parquet writers, spaces and splits, padded UI objects, ZIP archives.

`pipelines/export.py` wires them into the Beam pipeline; `tfds_writer` imports TensorFlow, so import it only
on the TFDS path.
"""
