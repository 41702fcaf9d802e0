"""Observations and actions as the protocol's `client_pb2.Data` (JSON plus images as PNG), for the replay
responses of the RLDS Creator client protocol and the player's step payloads."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
from google.protobuf import json_format
from google.protobuf.message import Message

from protos.rlds_creator import client_pb2

Progress = Callable[[float], None]

def _is_image(value: Any) -> bool:
    return (
        isinstance(value, np.ndarray)
        and value.dtype == np.uint8
        and value.ndim == 3
        and value.shape[-1] in (1, 3, 4)
        and value.shape[0] >= 8
        and value.shape[1] >= 8
    )


def _encode_png(array: np.ndarray) -> bytes:
    import io

    from PIL import Image

    if array.shape[-1] == 1:
        array = array[..., 0]
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, Message):
        return json_format.MessageToDict(value, preserving_proto_field_name=True)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def to_data(value: Any, name: str = "") -> client_pb2.Data:
    """Observation or action as the protocol's `Data`: images (HxWxC uint8) as PNGs, everything else as JSON.

    Nested dicts are walked so an observation {"rgb": frame, "pos": [..]} becomes one named image plus JSON of
    the rest. Protobuf messages (UI observations) are shown as JSON without their raw bytes fields.
    """
    data = client_pb2.Data()
    rest = _split_images(value, name, data)
    if rest is not None and not (isinstance(rest, dict) and not rest and data.images):
        data.json_encoded = json.dumps(_jsonable(rest), default=str)
    return data


def _split_images(value: Any, name: str, data: client_pb2.Data) -> Any:
    if _is_image(value):
        data.images.add(name=name, image=_encode_png(value))
        return None
    if isinstance(value, dict):
        rest = {}
        for key, item in value.items():
            sub = _split_images(item, f"{name}/{key}" if name else str(key), data)
            if sub is not None:
                rest[str(key)] = sub
        return rest
    if isinstance(value, Message):
        return _message_without_bytes(value)
    return value


def _message_without_bytes(message: Message) -> dict:
    copy = type(message)()
    copy.CopyFrom(message)
    _clear_bytes(copy)
    return json_format.MessageToDict(copy, preserving_proto_field_name=True)


def _clear_bytes(message: Message) -> None:
    for fd, value in message.ListFields():
        if fd.type == fd.TYPE_BYTES:
            message.ClearField(fd.name)
        elif fd.type == fd.TYPE_MESSAGE:
            if fd.label == fd.LABEL_REPEATED:
                if fd.message_type.GetOptions().map_entry:
                    continue
                for item in value:
                    _clear_bytes(item)
            else:
                _clear_bytes(value)
