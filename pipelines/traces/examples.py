"""`tf.train.Example` records without TensorFlow: decoding with the wire-compatible copy in
`protos/tfexample`, typed feature access, and which dataset a record belongs to. Pure (bytes in)."""

from __future__ import annotations

from google.protobuf import message

from protos.tfexample import example_pb2

#: Feature that marks each kind of record (schemas/layouts.md): an AndroidControl episode holds its
#: accessibility forests, an Android in the Wild step its step number.
ANDROID_CONTROL_KEY = "accessibility_trees"
AITW_KEY = "step_id"


#: Most steps (values of a per-step feature, an AITW step id or episode length) read from one episode's records:
#: AndroidControl and AITW episodes are tens of steps. Counted before any list is built from them.
MAX_STEPS = 100_000


class ExampleError(ValueError):
    """A record that is not a usable tf.train.Example (undecodable, or a required feature missing/mistyped)."""


def parse_example(data: bytes) -> example_pb2.Example:
    example = example_pb2.Example()
    try:
        example.ParseFromString(bytes(data))
    except message.DecodeError as exc:
        raise ExampleError(f"not a tf.train.Example ({exc})") from None
    return example


def record_kind(example: example_pb2.Example) -> str:
    """'android_control', 'aitw' or '' (neither) from the features present."""
    feature = example.features.feature
    if ANDROID_CONTROL_KEY in feature:
        return "android_control"
    if AITW_KEY in feature and "image/encoded" in feature:
        return "aitw"
    return ""


def _feature(example: example_pb2.Example, key: str, kind: str, required: bool):
    feature = example.features.feature
    if key not in feature:
        if required:
            raise ExampleError(f"feature {key!r} is missing")
        return ()
    f = feature[key]
    which = f.WhichOneof("kind")
    if which is None:
        return ()
    if which != kind:
        raise ExampleError(f"feature {key!r} is a {which}, expected a {kind}")
    return getattr(f, kind).value


def check_counts(example: example_pb2.Example, keys: tuple[str, ...], limit: int = MAX_STEPS) -> None:
    """ExampleError unless each feature of `keys` holds at most `limit` values (counted, not copied)."""
    feature = example.features.feature
    for key in keys:
        if key in feature:
            which = feature[key].WhichOneof("kind")
            count = len(getattr(feature[key], which).value) if which else 0
            if count > limit:
                raise ExampleError(f"feature {key!r} holds {count} values; at most {limit} steps are read")


def byte_values(example: example_pb2.Example, key: str, *, required: bool = False) -> list[bytes]:
    return list(_feature(example, key, "bytes_list", required))


def int_values(example: example_pb2.Example, key: str, *, required: bool = False) -> list[int]:
    return list(_feature(example, key, "int64_list", required))


def float_values(example: example_pb2.Example, key: str, *, required: bool = False) -> list[float]:
    return list(_feature(example, key, "float_list", required))


def scalar_int(example: example_pb2.Example, key: str) -> int:
    """The one int64 of a required scalar feature."""
    values = int_values(example, key, required=True)
    if len(values) != 1:
        raise ExampleError(f"feature {key!r} holds {len(values)} values, expected 1")
    return values[0]


def text(value: bytes, what: str, warnings: list[str]) -> str:
    """UTF-8 text of a bytes feature; bytes that are not UTF-8 become U+FFFD, with a warning naming `what`."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        warnings.append(f"{what} is not UTF-8: undecodable bytes replaced by U+FFFD")
        return value.decode("utf-8", errors="replace")


def first_text(example: example_pb2.Example, key: str, warnings: list[str]) -> str:
    values = byte_values(example, key)
    return text(values[0], key, warnings) if values else ""


def any_text(example: example_pb2.Example, key: str, warnings: list[str]) -> str:
    """The first value of a feature of any kind as text ("" when absent): metadata that releases store
    either as bytes or as numbers (AITW's android_api_level)."""
    feature = example.features.feature
    if key not in feature:
        return ""
    which = feature[key].WhichOneof("kind")
    values = getattr(feature[key], which).value if which else ()
    if not values:
        return ""
    return text(values[0], key, warnings) if which == "bytes_list" else str(values[0])
