"""`stepmark suggest` end to end on real studies (the DroidBot Yelp run of ../shared/fixtures and the sample UI
traces, converted and imported as scripts/demo.sh does), against a real model server process on loopback
(tests/chat_server.py), a Python callable and the grounded-instructions backend."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import apache_beam as beam
import pytest
import sqlalchemy as sa
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines import convert, ui_import
from pipelines.models import grounded_instructions
from pipelines.models.backend import Model
from pipelines.models.contract import StepRequest
from pipelines.store import field_values as fv
from pipelines.store import open_store
from pipelines.store.errors import InvalidSpec
from pipelines.store.field_defs import parse_text
from pipelines.store.models import EpisodeRow, FieldSuggestionRow
from pipelines.suggest import DEAD, AskBackend, Suggestion, Suggestions
from protos.rlds_creator import study_pb2
from stepmark.cli import main

REPO = Path(__file__).resolve().parents[2]
LEAD = "lead@example.com"
DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
FIELDS = """
fields:
  - name: instruction
    scope: step
    kind: text
  - name: pressed
    scope: step
    kind: choice
    options: [other, Bookmarks, Search]
    prompt: "Which tab did the user press, judging by '{target}'? Answer with exactly one of: {options}."
  - name: goal_met
    scope: step
    kind: choice
    options: ["yes", "no"]
    prompt: "Did this step help the goal? Reply yes or no."
  - name: notes
    scope: episode
    kind: text
"""


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("converted")
    out = {"yelp": root / "yelp", "samples": root / "samples"}
    assert convert.run([str(fixtures_dir / "droidbot"), str(out["yelp"]), "--quiet"]) == 0
    assert convert.run([str(REPO / "samples" / "ui"), str(out["samples"]), "--quiet"]) == 0
    return out


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "chat_server.py")], stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def stats(url: str, reset: bool = False) -> dict:
    if reset:
        urllib.request.urlopen(urllib.request.Request(url + "/reset", b"", method="POST"), timeout=10).read()
    return json.loads(urllib.request.urlopen(url + "/stats", timeout=10).read())


class Study:
    def __init__(self, data: Path, converted: Path, fields: str = FIELDS, url: str | None = None) -> None:
        self.data, self.url = data, url
        self.repo = open_store(url, data)
        self.id = ui_import.import_ui(self.repo, str(converted), "Suggest test", LEAD).id
        fv.define(self.repo, self.id, parse_text(fields, "fields.yaml"), LEAD)
        self.episodes = [e.id for e in self.repo.list_episodes(study_id=self.id)]

    def suggest(self, *args: str) -> int:
        store = ["--store", self.url] if self.url else []
        return main(["suggest", "--study", self.id, *args, "--data", str(self.data), *store, "--user", LEAD, "--quiet"])

    def suggestions(self, source: str) -> dict[tuple[str, int], object]:
        with self.repo._read() as s:
            rows = s.scalars(sa.select(FieldSuggestionRow).where(FieldSuggestionRow.source == source))
            return {(r.field, r.step_index): r.value for r in rows}

    def dead(self, author: str) -> list[dict]:
        folder = self.data / "suggest" / self.id / author.replace(":", "_")
        return [json.loads(line) for line in (folder / "dead_letters.jsonl").read_text().splitlines()]


@pytest.fixture
def yelp(tmp_path: Path, converted: dict[str, Path]) -> Iterator[Study]:
    study = Study(tmp_path / "data", converted["yelp"])
    yield study
    study.repo.close()


def test_openai_backend_end_to_end(yelp: Study, server: str, capsys: pytest.CaptureFixture) -> None:
    """Every step field asked of the chat server, one prompt per field with the screenshot attached; the
    answers follow the prompts (the server reads them), bad ones are dead letters, a person's value stays."""
    (episode,) = yelp.episodes
    ref = yelp.repo.refs_of([episode])[episode]
    mine = fv.set_value(yelp.repo, ref, "instruction", LEAD, "Accept the location prompt", step=0)
    stats(server, reset=True)
    assert yelp.suggest("--backend", f"openai:{server}/v1", "--model", "echo@2", "--in-flight", "3") == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith(f"suggest model:echo@2 on study {yelp.id}: 1 episode(s), 32 step(s) asked, "
                           "64 suggestion(s) stored, 0 place(s) already suggested, 32 dead letter(s) (bad_answer 32)")
    seen = stats(server)
    assert (seen["requests"], seen["images"], seen["by_model"]) == (96, 96, {"echo": 96})  # 3 step fields x 32

    got = yelp.suggestions("model:echo@2")
    # the default text prompt carries the step's action in words; the server echoes its `Action:` line
    assert got[("instruction", 0)] == "Click on 'Yes, turn it on'"
    assert got[("instruction", 30)] == "Click on 'Navigate up'"
    # the field's own prompt names the target: the server picks the option it names, else the first
    assert [got[("pressed", i)] for i in (0, 3, 5, 9)] == ["other", "Bookmarks", "other", "Search"]
    assert not any(name == "goal_met" for name, _ in got)  # its prompt gives no options: no value stored
    dead = yelp.dead("model:echo@2")
    assert {d["field"] for d in dead} == {"goal_met"} and len(dead) == 32
    assert dead[0]["reason"] == "bad_answer" and dead[0]["episode"] == episode
    assert "'I do not understand the question' is not one of its options ['yes', 'no']" in dead[0]["detail"]

    # the person's value is untouched; keeping the model's suggestion is `accepted`
    (value,) = [v for v in fv.values(yelp.repo, [episode])[episode] if v.step == 0]
    assert (value.value, value.origin, value.time) == (mine.value, "scratch", mine.time)
    kept = fv.set_value(yelp.repo, ref, "instruction", "bob@example.com", "Click on 'Yes, turn it on'", step=0)
    assert kept.origin == "accepted"

    assert main(["fields", "show", "--study", yelp.id, "--json", "--data", str(yelp.data)]) == 0
    shown = {f["name"]: f["suggestions"] for f in json.loads(capsys.readouterr().out)["fields"]}
    assert shown == {"instruction": {"model:echo@2": 32}, "pressed": {"model:echo@2": 32}, "goal_met": {},
                     "notes": {}}  # fmt: skip


def test_a_refused_request_loses_only_its_own_field(tmp_path: Path, converted: dict[str, Path], server: str) -> None:
    """An HTTP 400 for one field's prompt is that field's dead letter; the step's other fields, answered before
    it, are stored."""
    fields = FIELDS.replace("Did this step help the goal? Reply yes or no.", "[refuse] Did this step help?")
    study = Study(tmp_path / "data", converted["yelp"], fields=fields)
    try:
        assert study.suggest("--backend", f"openai:{server}/v1", "--model", "echo@3") == 0
        got = study.suggestions("model:echo@3")
        assert sum(name == "instruction" for name, _ in got) == 32 and sum(name == "pressed" for name, _ in got) == 32
        dead = study.dead("model:echo@3")
        assert len(dead) == 32 and {d["field"] for d in dead} == {"goal_met"}
        assert all("HTTP 400" in d["detail"] for d in dead), dead[0]
    finally:
        study.repo.close()


def test_a_run_again_asks_only_what_is_missing(yelp: Study, server: str, capsys: pytest.CaptureFixture) -> None:
    """Resumable: places holding this model's suggestion are never asked again (counted at the server)."""
    backend = ["--backend", f"openai:{server}", "--model", "echo@2", "--field", "instruction"]
    stats(server, reset=True)
    assert yelp.suggest(*backend) == 0
    assert stats(server)["requests"] == 32
    with yelp.repo._write() as s:  # as if killed half-way: the later steps' suggestions never written
        s.execute(sa.delete(FieldSuggestionRow).where(FieldSuggestionRow.step_index >= 20))
    stats(server, reset=True)
    assert yelp.suggest(*backend) == 0
    assert stats(server)["requests"] == 12
    assert "12 step(s) asked, 12 suggestion(s) stored, 20 place(s) already suggested" in capsys.readouterr().out
    assert len(yelp.suggestions("model:echo@2")) == 32
    stats(server, reset=True)
    assert yelp.suggest(*backend, "--field", "pressed") == 0  # only the new field is asked
    assert stats(server)["requests"] == 32
    assert yelp.suggest(*backend) == 0
    assert stats(server)["requests"] == 32
    assert "0 step(s) asked, 0 suggestion(s) stored, 32 place(s) already suggested" in capsys.readouterr().out


def test_an_unavailable_model_is_retried_then_dead_lettered(yelp: Study, server: str) -> None:
    stats(server, reset=True)
    args = ["--backend", f"openai:{server}", "--model", "down", "--field", "instruction", "--retries", "1"]
    assert yelp.suggest(*args, "--in-flight", "8") == 0
    assert stats(server)["requests"] == 64  # each step tried twice
    dead = yelp.dead("model:down@unversioned")
    assert len(dead) == 32 and {d["reason"] for d in dead} == {"unavailable"}
    assert "after 2 tries" in dead[0]["detail"] and "HTTP 503" in dead[0]["detail"]
    assert yelp.suggestions("model:down@unversioned") == {}


def answer_everything(request: StepRequest) -> dict:
    """A Python backend answering every kind the contract has, some of it wrong on purpose."""
    return {
        "model": {"name": "callable", "version": "0.1"},
        "fields": [
            {"field": "instruction", "value": f"step {request.step} of {request.steps}", "score": 0.5},
            {"field": "pressed", "value": "Bookmarks" if request.step % 2 else "nowhere"},
        ],
        "tags": [{"tag": "navigation"}],
        "target": {"object_index": request.action["target_index"]},
    }


def test_python_backend(yelp: Study) -> None:
    args = ["--backend", "python:tests.pipelines.test_suggest:answer_everything", "--model", "callable@0.1"]
    assert yelp.suggest(*args, "--field", "instruction", "--field", "pressed") == 0
    got = yelp.suggestions("model:callable@0.1")
    assert got[("instruction", 3)] == "step 3 of 32" and got[("pressed", 3)] == "Bookmarks"
    assert ("pressed", 4) not in got
    reasons: dict[str, int] = {}
    for d in yelp.dead("model:callable@0.1"):
        reasons[d["reason"]] = reasons.get(d["reason"], 0) + 1
    assert reasons == {"bad_answer": 16, "not_stored": 64}  # "nowhere" on even steps; a tag and a target each
    bad = next(d for d in yelp.dead("model:callable@0.1") if d["reason"] == "bad_answer")
    assert bad["field"] == "pressed" and "'nowhere' is not one of its options" in bad["detail"]

    # the answer must come from the model asked for
    assert yelp.suggest("--backend", "python:tests.pipelines.test_suggest:answer_everything", "--model", "other@1",
                        "--field", "instruction") == 0  # fmt: skip
    assert {d["reason"] for d in yelp.dead("model:other@1")} == {"wrong_model"}


def test_grounded_instructions_on_real_steps(tmp_path: Path, converted: dict[str, Path]) -> None:
    samples = Study(tmp_path / "samples", converted["samples"], "fields:\n - {name: instruction, scope: step, kind: text}\n")
    assert samples.suggest("--backend", "grounded-instructions") == 0
    with samples.repo._read() as s:
        by_key = dict(s.execute(sa.select(EpisodeRow.id, EpisodeRow.source_key)).all())
        rows = s.scalars(sa.select(FieldSuggestionRow).where(FieldSuggestionRow.source == "model:grounded-instructions@1"))
        got = {(by_key[r.episode_id], r.step_index): r.value for r in rows}
    faasos = "ui:rico_trace/com.done.faasos"
    assert [got[(faasos, i)] for i in range(6)] == [
        "Click on 'NEXT'", "Click on 'SIGN IN'", "Click on 'Terms And Conditions'",
        "Click on 'MANUALLY SELECT LOCATION'", "Scroll down", "Click on 'SIGN IN'",
    ]  # fmt: skip
    assert got[("ui:droidbot/yelp_run", 1)] == "Click on 'I'm New'"
    assert (faasos, 6) not in got  # the last screen has no action: no instruction
    unanswered = [d for d in samples.dead("model:grounded-instructions@1") if d["reason"] == "no_answer"]
    assert len(unanswered) == 5  # that screen and the four single screens
    samples.repo.close()

    yelp = Study(tmp_path / "yelp", converted["yelp"])
    assert yelp.suggest("--backend", "python:pipelines.models.grounded_instructions:suggest", "--field", "instruction") == 0
    got = yelp.suggestions("model:grounded-instructions@1")
    assert (got[("instruction", 19)], got[("instruction", 28)]) == ("Click on 'tint'", "Click at (720, 2030)")
    yelp.repo.close()


@pytest.mark.parametrize(("action", "target", "expected"), [
    ({"type": "TYPE_TEXT", "text": "pizza  place"}, {"text": "", "content_desc": "Search"}, "Type 'pizza place' in 'Search'"),
    ({"type": "OPEN_APP", "text": "Zoho Meet"}, None, "Open the Zoho Meet app"),
    ({"type": "BACK"}, None, "Go back"),
    ({"type": "SWIPE", "x": 500, "y": 300, "end_x": 100, "end_y": 310}, {"text": "Offers"}, "Scroll right on 'Offers'"),
    ({"type": "SWIPE", "direction": "up"}, None, "Scroll up"),
    ({"type": "LONG_PRESS"}, {"resource_id": "com.app:id/photo_grid"}, "Long press on 'photo grid'"),
    ({"type": "TASK_COMPLETE"}, None, None),
])  # fmt: skip
def test_grounded_instruction_phrasing(action: dict, target: dict | None, expected: str | None) -> None:
    request = StepRequest("s", "e", "k", 0, 1, objects=[target] if target else [],
                          action={**action, "target_index": 0 if target else None})  # fmt: skip
    assert grounded_instructions.instruction(request) == expected


def test_ask_backend_dofn(converted: dict[str, Path]) -> None:
    """The DoFn alone (TestPipeline): real steps' requests in, checked suggestions and dead letters out."""
    from pipelines import ui_records
    from pipelines.models.step_requests import step_request

    (record,) = ui_records.iter_episodes(str(converted["yelp"]))
    fields = [{"name": "instruction", "scope": "step", "kind": "text"}]
    requests = [step_request(record, i, study="s", episode="e", fields=fields, wanted=["instruction"]).to_json()
                for i in (0, 2)]  # fmt: skip
    model = Model(grounded_instructions.NAME, grounded_instructions.VERSION)
    with TestPipeline(runner="FnApiRunner") as p:
        out = (p | beam.Create([(0, requests)]) | beam.ParDo(AskBackend("grounded-instructions", model, 2, 5.0, 0))
               .with_outputs(DEAD, main="suggestions"))  # fmt: skip
        assert_that(out.suggestions, equal_to([Suggestions((
            Suggestion("e", 0, "instruction", "Click on 'Yes, turn it on'"),
            Suggestion("e", 2, "instruction", "Click on 'Sign up with Facebook'"),
        ))]), label="suggestions")  # fmt: skip
        assert_that(out[DEAD], equal_to([]), label="dead")


def test_a_prompt_with_an_unknown_placeholder_is_refused() -> None:
    bad = "fields:\n - {name: why, scope: step, kind: text, prompt: 'Why {reason}?'}\n"
    with pytest.raises(InvalidSpec, match=r"f.yaml: fields\[0\] \(why\): prompt: unknown placeholder\(s\) \['reason'\]"):
        parse_text(bad, "f.yaml")
    (field,) = parse_text("fields:\n - {name: why, scope: step, kind: text, prompt: 'Why {action}?'}\n", "f.yaml")
    assert field.to_json()["prompt"] == "Why {action}?"


@pytest.mark.parametrize("placeholder", ["{goal:d}", "{goal!x}", "{goal:{zzz}}", "{goal!r}"])
def test_a_prompt_placeholder_with_a_format_spec_is_refused_when_the_file_is_read(placeholder: str) -> None:
    """Filling these in raises (ValueError/KeyError) in the middle of a run; the fields file is refused instead."""
    bad = f"fields:\n - {{name: why, scope: step, kind: text, prompt: 'Why {placeholder}?'}}\n"
    with pytest.raises(InvalidSpec, match=r"f.yaml: fields\[0\] \(why\): prompt: placeholder\(s\) \['goal'\] with a"):
        parse_text(bad, "f.yaml")


@pytest.mark.slow
def test_suggest_on_a_dask_cluster_of_processes(yelp: Study, server: str) -> None:
    distributed = pytest.importorskip("distributed")
    logging.getLogger("distributed").setLevel(logging.ERROR)
    stats(server, reset=True)
    with (
        distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as cluster,
        distributed.Client(cluster),
    ):
        assert yelp.suggest("--backend", f"openai:{server}", "--model", "echo@2", "--field", "instruction",
                            f"--runner={DASK_RUNNER}", f"--dask_client_address={cluster.scheduler_address}") == 0  # fmt: skip
    assert stats(server)["requests"] == 32
    got = yelp.suggestions("model:echo@2")
    assert len(got) == 32 and got[("instruction", 2)] == "Click on 'Sign up with Facebook'"
    summary = json.loads((yelp.data / "suggest" / yelp.id / "model_echo@2" / "summary.json").read_text())
    assert summary["runner"] == DASK_RUNNER and summary["suggestions_stored"] == 32


def test_selection_by_episode_tag_and_state(tmp_path: Path, converted: dict[str, Path],
                                            capsys: pytest.CaptureFixture) -> None:  # fmt: skip
    """--episode (a converted episode's own id), --tag (on a step) and --state pick the episodes asked about."""
    study = Study(tmp_path / "samples", converted["samples"], "fields:\n - {name: instruction, scope: step, kind: text}\n")
    with study.repo._read() as s:
        ids = dict(s.execute(sa.select(EpisodeRow.source_key, EpisodeRow.id)).all())
    faasos, yelp_run = ids["ui:rico_trace/com.done.faasos"], ids["ui:droidbot/yelp_run"]
    assert study.suggest("--backend", "grounded-instructions", "--episode", "droidbot/yelp_run") == 0
    assert {k for k in study.suggestions("model:grounded-instructions@1")} == {("instruction", i) for i in range(3)}
    assert "1 episode(s), 3 step(s) asked" in capsys.readouterr().out
    study.repo.add_step_tag(study.repo.refs_of([faasos])[faasos], 4, "scroll", LEAD)
    assert study.suggest("--backend", "grounded-instructions", "--tag", "scroll") == 0
    assert "1 episode(s), 7 step(s) asked" in capsys.readouterr().out
    with study.repo._read() as s:
        rows = s.execute(sa.select(FieldSuggestionRow.episode_id).where(
            FieldSuggestionRow.source == "model:grounded-instructions@1"))  # fmt: skip
        assert {eid for (eid,) in rows} == {faasos, yelp_run}
        (state,) = set(s.scalars(sa.select(EpisodeRow.state)))
    name = study_pb2.Episode.State.Name(state)
    other = next(n for n in study_pb2.Episode.State.keys() if n != name)
    assert study.suggest("--backend", "grounded-instructions", "--state", other) == 0
    assert ": 0 episode(s), 0 step(s) asked" in capsys.readouterr().out
    assert study.suggest("--backend", "grounded-instructions", "--state", name) == 0
    # the step folder was not asked yet; places without an answer (no action) are asked again
    assert ": 7 episode(s), 8 step(s) asked, 3 suggestion(s) stored, 9 place(s) already suggested" in capsys.readouterr().out
    assert study.suggest("--backend", "grounded-instructions", "--state", "DONE") == 2
    assert "--state 'DONE': not an episode state" in capsys.readouterr().err
    study.repo.close()


@pytest.mark.postgres
def test_suggest_on_postgresql(tmp_path: Path, converted: dict[str, Path], server: str, pg_url: str) -> None:
    study = Study(tmp_path / "data", converted["yelp"], url=pg_url)
    stats(server, reset=True)
    assert study.suggest("--backend", f"openai:{server}", "--model", "echo@2", "--field", "instruction") == 0
    assert study.suggest("--backend", f"openai:{server}", "--model", "echo@2", "--field", "instruction") == 0
    assert stats(server)["requests"] == 32  # the second run found every place done
    got = study.suggestions("model:echo@2")
    assert len(got) == 32 and got[("instruction", 31)] == "Click on 'Support Center'"
    assert fv.suggestion_counts(study.repo, study.id) == {"instruction": {"model:echo@2": 32}}
    study.repo.close()


def test_bad_commands_are_refused_in_one_line(yelp: Study, capsys: pytest.CaptureFixture) -> None:
    for args, message in [
        (["--backend", "llama"], "--backend 'llama': expected openai:URL, python:package.module:function or one of"),
        (["--backend", "openai:http://127.0.0.1:9"], "give the served model's name with --model NAME[@VERSION]"),
        (["--backend", "python:no_such_module:f"], "python:no_such_module:f: cannot import no_such_module"),
        (["--backend", "grounded-instructions", "--field", "notes"], "--field notes: a field of scope episode; suggest fills step fields"),
        (["--backend", "grounded-instructions", "--field", "nope"], "--field nope: study"),
        (["--backend", "grounded-instructions", "--episode", "nope"], "--episode nope: no such UI episode"),
        (["--backend", "grounded-instructions", "--in-flight", "0"], "--in-flight must be between 1 and 256"),
    ]:
        assert yelp.suggest(*args) == 2, args
        assert message in capsys.readouterr().err, args
    assert main(["suggest", "--study", yelp.id, "--backend", "grounded-instructions", "--data", str(yelp.data),
                 "--user", "someone@example.com", "--quiet"]) == 2  # fmt: skip
    assert "only the creator (lead@example.com) or a reviewer may store model suggestions" in capsys.readouterr().err
    assert yelp.suggestions("model:grounded-instructions@1") == {}


def test_a_killed_run_resumes_where_it_stopped(yelp: Study) -> None:
    """A real kill (SIGKILL of the command mid-run), then a run again: only the places still without this
    model's suggestion are asked (counted at a slow server), and every step ends with exactly one."""
    import os
    import signal
    import time

    slow = subprocess.Popen([sys.executable, str(REPO / "tests" / "chat_server.py"), "--latency", "0.1"],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{int(slow.stdout.readline())}"
        cmd = [sys.executable, "-m", "stepmark", "suggest", "--study", yelp.id, "--backend", f"openai:{url}",
               "--model", "echo@2", "--field", "instruction", "--in-flight", "1", "--data", str(yelp.data),
               "--user", LEAD, "--quiet"]  # fmt: skip
        run = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
        deadline = time.monotonic() + 120
        while not yelp.suggestions("model:echo@2") and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.05)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(10)
        stored = len(yelp.suggestions("model:echo@2"))
        assert 0 < stored < 32, stored
        asked = stats(url)["requests"]
        stats(url, reset=True)
        assert yelp.suggest("--backend", f"openai:{url}", "--model", "echo@2", "--field", "instruction") == 0
        assert stats(url)["requests"] == 32 - stored  # the killed run had asked `asked`, stored `stored`
        assert asked >= stored
    finally:
        slow.terminate()
        slow.wait(10)
    got = yelp.suggestions("model:echo@2")
    assert len(got) == 32 and got[("instruction", 9)] == "Click on 'Search'"
    out = yelp.data / "suggest" / yelp.id / "model_echo@2"
    assert not list(out.glob(".parts-*"))  # the killed run's part folder went with the run again
    assert yelp.dead("model:echo@2") == []
