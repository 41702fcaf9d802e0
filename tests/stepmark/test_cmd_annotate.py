"""`stepmark annotate` passes on who is annotating, and never takes the login name for it: on a shared machine
that would name every visitor after whoever started the server (issue 24)."""

from __future__ import annotations

import pytest

from annotator import launch
from stepmark.cli import main


@pytest.fixture
def started(monkeypatch) -> list[launch.LaunchConfig]:
    """The launch configs `stepmark annotate` would run (the server itself is not started)."""
    calls: list[launch.LaunchConfig] = []
    monkeypatch.setattr(launch, "run", lambda config: calls.append(config) or 0)
    monkeypatch.setattr("stepmark.cli.default_user", lambda: "root")
    return calls


def test_without_user_the_annotator_asks_for_a_name(tmp_path, started, capsys):
    assert main(["annotate", "--data", str(tmp_path), "--port", "8765"]) == 0
    (config,) = started
    assert config.user is None
    assert "--user" not in launch.command(config)
    assert "for annotators who give their name" in capsys.readouterr().out


def test_user_is_passed_on(tmp_path, started):
    assert main(["annotate", "--data", str(tmp_path), "--port", "8765", "--user", "ann@example.com"]) == 0
    (config,) = started
    assert config.user == "ann@example.com"
    assert launch.command(config)[-2:] == ["--user", "ann@example.com"]
