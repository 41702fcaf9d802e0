"""Memory of the annotator's frame route over large screenshots: peak RSS of serving one step's frame, side by
side for screenshots of growing size, each measured in a fresh child process.

Peak resident memory is sampled every millisecond while the frame is made. The route
(`annotator.web.player_data.frame`) sends a frame of at most DISPLAY_HEIGHT rows: a JPEG is decoded at
a reduced scale (libjpeg's DCT scaling), a PNG is decoded whole and then scaled, and a screenshot whose header
claims more than MAX_DECODE_PIXELS is refused before decoding (a decompression bomb). Printed, not asserted.

    .venv/bin/python bench/bench_annotator_memory.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SIZES = [(1080, 1920), (2160, 3840), (4000, 8000), (12000, 12000)]

CHILD = """
import io, json, os, sys, threading, time
sys.path.insert(0, {repo!r})
from PIL import Image
from annotator.web import player_data
from pipelines.episodes.base import Step
PAGE = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE
data = open(sys.argv[1], "rb").read()
base = rss()
peak = [base]
done = threading.Event()
def sample():
    while not done.is_set():
        peak[0] = max(peak[0], rss())
        time.sleep(0.001)
t = threading.Thread(target=sample)
t.start()
step = Step(index=0, observation=None, action=None, reward=0.0, discount=1.0, is_first=True, is_last=False,
            is_terminal=False, image=data)
try:
    out = player_data.frame(step, "env")
    result = {{"sent": list(Image.open(io.BytesIO(out.data)).size), "bytes": len(out.data)}}
except player_data.FrameError as exc:
    result = {{"refused": str(exc)}}
done.set()
t.join()
print(json.dumps({{"input_bytes": len(data), "grew": peak[0] - base, **result}}))
"""


def measure(path: Path) -> dict:
    """Serve the frame of the screenshot in `path` in a fresh process (the file is made beforehand, elsewhere,
    so the child's peak RSS counts the route's decoding only)."""
    code = CHILD.format(repo=str(REPO))
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
                         timeout=600)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def make(folder: Path, fmt: str, w: int, h: int) -> Path:
    from PIL import Image

    path = folder / f"{w}x{h}.{fmt.lower()}"
    Image.new("RGB", (w, h), (40, 90, 160)).save(path, format=fmt)
    return path


def main() -> None:
    print(f"{'screenshot':>14} {'fmt':>5} {'input MB':>9} {'peak RSS +MB':>13} {'sent':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        files = [(fmt, w, h, make(Path(tmp), fmt, w, h)) for fmt in ("JPEG", "PNG") for w, h in SIZES]
        rows = [(fmt, w, h, measure(path)) for fmt, w, h, path in files]
    for fmt, w, h, r in rows:
        grew = r["grew"] / 2**20
        sent = "x".join(map(str, r["sent"])) if "sent" in r else "refused"
        print(f"{w:>6}x{h:<7} {fmt:>5} {r['input_bytes'] / 1e6:9.2f} {grew:13.1f} {sent:>12}")


if __name__ == "__main__":
    main()
