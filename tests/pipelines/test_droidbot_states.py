"""DroidBot saving one screen twice (issue 32 item 4): two state files share a `state_str`; each event starts in
the newest one saved at or before it, not the oldest (minutes stale in a long run)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.pipelines.test_traces import build_droidbot, read

SEEN_FIRST = "2017-08-11_202356"  # state 202356: events 202356, 202402, 202412, 202423, 202538, 202626 start in it
SAVED_AGAIN = "2017-08-11_202500"
SAVED_LAST = "2017-08-11_202700"  # after every event: no event may start in it


def save_again(run: Path, fx: Path, tag: str) -> None:
    """What DroidBot writes when it saves the screen of state SEEN_FIRST again at `tag`."""
    src = fx / "droidbot" / "yelp" / "states"
    state = json.loads((src / f"state_{SEEN_FIRST}.json").read_text())
    state["tag"] = tag
    (run / "states" / f"state_{tag}.json").write_text(json.dumps(state))
    (run / "states" / f"screen_{tag}.png").write_bytes((src / f"screen_{SEEN_FIRST}.png").read_bytes())


def test_event_gets_the_newest_state_saved_at_or_before_it(tmp_path: Path, fixtures_dir: Path) -> None:
    run = build_droidbot(tmp_path / "run", fixtures_dir)
    save_again(run, fixtures_dir, SAVED_AGAIN)
    save_again(run, fixtures_dir, SAVED_LAST)
    ep = read(run)
    used = {s.name: (Path(s.hierarchy_path).name, Path(s.screenshot_path).name) for s in ep.steps}
    for event in ("2017-08-11_202356", "2017-08-11_202402", "2017-08-11_202412", "2017-08-11_202423"):
        assert used[event] == (f"state_{SEEN_FIRST}.json", f"screen_{SEEN_FIRST}.png")
    for event in ("2017-08-11_202538", "2017-08-11_202626"):
        assert used[event] == (f"state_{SAVED_AGAIN}.json", f"screen_{SAVED_AGAIN}.png")
    assert not any(SAVED_LAST in h for h, _ in used.values())
    # A state saved only after the event that starts in it (DroidBot's clocks): still the first one after it.
    assert used["2017-08-11_202436"][0] == "state_2017-08-11_202441.json"
    assert len(ep.steps) == 35 - 3 and not [d for d in ep.dead_letters if d.reason != "missing_state"]
