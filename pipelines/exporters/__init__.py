"""Export building blocks: episode selection, per-episode transforms, envlogger and TFDS writers, ZIP archives.

`pipelines/export.py` wires them into the Beam pipeline; `tfds_writer` imports TensorFlow, so import it only
on the TFDS path.
"""
