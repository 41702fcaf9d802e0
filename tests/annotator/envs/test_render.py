"""JPEG encoding of real frames at the three SetQualityRequest levels."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, JpegImagePlugin

from annotator.envs import registry, render
from annotator.envs.render import encode_jpeg, encode_jpeg_pillow
from pipelines.errors import StepmarkError
from protos.rlds_creator import client_pb2, study_pb2

Q = client_pb2.SetQualityRequest.Quality


@pytest.fixture(scope="module")
def frame() -> np.ndarray:
    """A real game frame, upscaled the way a display would show it."""
    spec = study_pb2.EnvironmentSpec(id="pg", sync=True)
    spec.procgen.id = "starpilot"
    spec.procgen.rand_seed = 9
    env = registry.create(spec)
    env.reset()
    for _ in range(10):
        env.step(env.action_from_input(["ArrowRight"]))
    image = env.render()
    env.close()
    return np.kron(image, np.ones((4, 4, 1), np.uint8))


@pytest.mark.parametrize("encode", [encode_jpeg, encode_jpeg_pillow], ids=["default", "pillow"])
@pytest.mark.parametrize("scale", [1, 4], ids=["64x64", "256x256"])
def test_quality_levels_order_sizes(frame: np.ndarray, encode, scale: int):
    frame = frame[::4, ::4] if scale == 1 else frame
    low, medium, high = (encode(frame, q) for q in (Q.QUALITY_LOW, Q.QUALITY_MEDIUM, Q.QUALITY_HIGH))
    assert len(low) < len(medium) < len(high)
    assert encode(frame, Q.QUALITY_UNSPECIFIED) == medium
    decoded = Image.open(io.BytesIO(high))
    assert decoded.format == "JPEG" and decoded.size == (frame.shape[1], frame.shape[0])
    # Higher quality is closer to the source.
    errors = [
        np.abs(np.asarray(Image.open(io.BytesIO(b)), np.int16) - frame).mean() for b in (low, medium, high)
    ]
    assert errors[0] > errors[1] > errors[2]


@pytest.mark.skipif(
    render.simplejpeg is None, reason="simplejpeg not installed: encode_jpeg is Pillow itself"
)
@pytest.mark.parametrize("level", [Q.QUALITY_LOW, Q.QUALITY_MEDIUM, Q.QUALITY_HIGH])
def test_fast_encoder_matches_the_pillow_preset_fidelity(frame: np.ndarray, level: int):
    """The libjpeg-turbo quality chosen for each preset loses about as much as the preset itself."""
    small = frame[::4, ::4]

    def error(data: bytes) -> float:
        return float(np.abs(np.asarray(Image.open(io.BytesIO(data)), np.int16) - small).mean())

    fast, reference = error(encode_jpeg(small, level)), error(encode_jpeg_pillow(small, level))
    assert abs(fast - reference) < 0.25 * reference
    sampling = JpegImagePlugin.get_sampling(Image.open(io.BytesIO(encode_jpeg(small, level))))
    assert sampling == JpegImagePlugin.get_sampling(Image.open(io.BytesIO(encode_jpeg_pillow(small, level))))


def test_bad_frames_and_levels_are_refused(frame: np.ndarray):
    with pytest.raises(StepmarkError, match="HxWx3"):
        encode_jpeg(np.zeros((4, 4, 5), np.uint8))
    with pytest.raises(StepmarkError, match="unknown frame quality"):
        encode_jpeg(frame, 9)
    grey = encode_jpeg(frame[:, :, 0])  # HxW accepted as grey
    assert Image.open(io.BytesIO(grey)).mode == "RGB"
