"""Group commit on the ack path (issue 33): deliveries that arrive together share one commit, and
each is still answered for its own: a duplicate, a full queue or a journal that cannot be written
fails only the delivery it belongs to, and nothing is acknowledged before its journal line is on disk.

The batches are formed for real: the store's write lock is held while deliveries queue up behind
it in threads, as they do behind a commit on its way to disk. Nothing is mocked; a journal failure
is a regular file planted where an incident's journal directory must go.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from runbook.errors import Busy, JournalError
from runbook.record.journal import incident_dir, read_journal
from runbook.webhook import alertmanager
from runbook.webhook.group_commit import GroupCommit
from runbook.webhook.service import Service
from runbook.webhook.settings import WebhookConfig
from tests.webhook.helpers import oom_world, playbook, secrets

BOUND = 10.0  # seconds any wait below may take before the test fails (it never sleeps)


def until(condition) -> None:
    """Wait for another thread to get somewhere, failing after BOUND seconds rather than hanging."""
    deadline = time.monotonic() + BOUND
    while not condition():
        assert time.monotonic() < deadline, "the other threads never got there"
        time.sleep(0.001)


def delivery(index: int, *, namespace: str = "llm"):
    """An Alertmanager v4 group with one firing alert, parsed the way the route parses it."""
    doc = {"version": "4", "groupKey": f'{{}}:{{n="{index}"}}', "status": "firing", "receiver": "runbook",
           "alerts": [{"status": "firing", "labels": {"alertname": "VllmOomSurge", "namespace": namespace,
                                                      "n": str(index)},
                       "annotations": {}, "startsAt": "2026-03-14T03:12:07Z", "endsAt": "0001-01-01T00:00:00Z",
                       "fingerprint": f"{index + 1:016x}"}]}
    return alertmanager.parse(json.dumps(doc).encode())


@pytest.fixture
def service(tmp_path: Path) -> Service:
    # The workers are never started: what is tested is the answer and what is on disk before it.
    return Service(config=WebhookConfig(workers=1, queue_size=3), secrets=secrets(), state=tmp_path / "state",
                   world=oom_world(), playbooks=[playbook()], env={}, sweeper=False)


def alerts_in(service: Service, incident: str) -> list[str]:
    path = incident_dir(service.state, incident) / "journal.jsonl"
    return [e.data["delivery"]["event_key"] for e in read_journal(path).events if e.type == "alert.received"]


def test_a_lone_caller_commits_at_once_and_callers_that_wait_go_together():
    entered, release = threading.Event(), threading.Event()
    batches: list[list[int]] = []

    def commit(items: list[int]) -> list[int | BaseException]:
        batches.append(list(items))
        if len(batches) == 1:
            entered.set()
            assert release.wait(BOUND)
        return [ValueError(f"odd {i}") if i % 2 else i * 10 for i in items]

    group: GroupCommit[int, int] = GroupCommit(commit)
    with ThreadPoolExecutor(max_workers=6) as pool:
        first = pool.submit(group.submit, 0)
        assert entered.wait(BOUND)
        rest = {i: pool.submit(group.submit, i) for i in range(1, 6)}
        until(lambda: group.waiting() == 5)  # all five queue behind the first commit
        assert not first.done()
        release.set()
        assert first.result(BOUND) == 0
        for i, future in rest.items():
            if i % 2:
                with pytest.raises(ValueError, match=f"odd {i}"):
                    future.result(BOUND)
            else:
                assert future.result(BOUND) == i * 10
    assert batches[0] == [0]
    assert sorted(batches[1]) == [1, 2, 3, 4, 5] and len(batches) == 2
    assert (group.batches, group.items) == (2, 6)


def test_a_commit_that_raises_fails_every_caller_of_its_batch_and_the_next_batch_goes_on():
    calls = []

    def commit(items: list[str]) -> list[str]:
        calls.append(items)
        if "boom" in items:
            raise OSError("disk gone")
        return [i.upper() for i in items]

    group: GroupCommit[str, str] = GroupCommit(commit)
    with pytest.raises(OSError, match="disk gone"):
        group.submit("boom")
    assert group.submit("ok") == "OK"


def test_a_batch_is_bounded():
    group: GroupCommit[int, int] = GroupCommit(lambda items: list(items), most=2)
    assert group.most == 2
    with pytest.raises(ValueError):
        GroupCommit(lambda items: list(items), most=0)


def test_deliveries_held_behind_a_commit_are_committed_together_each_answered_and_journaled(service):
    intake = service.intake
    first = delivery(0)
    later = [delivery(1), delivery(0), delivery(2)]  # the second is a redelivery of the first
    with ThreadPoolExecutor(max_workers=4) as pool:
        with service.store.transaction():  # a commit on its way to disk: everyone waits behind it
            leading = pool.submit(service.accept, first)
            until(intake.batches.committing)
            queued = [pool.submit(service.accept, d) for d in later]
            until(lambda: intake.batches.waiting() == 3)
        acks = [leading.result(BOUND)] + [f.result(BOUND) for f in queued]
    assert intake.batches.batches == 2 and intake.batches.items == 4
    assert [a.status for a in acks] == [202, 202, 200, 202]
    first_incident = acks[0].body["alerts"][0]["incident"]
    assert acks[2].body["alerts"] == [{"verdict": "duplicate", "incident": first_incident}]
    for ack in (acks[0], acks[1], acks[3]):
        incident = ack.body["alerts"][0]["incident"]
        assert ack.queued == (incident,)
        assert len(alerts_in(service, incident)) == 1  # on disk before the answer, once
    assert service.store.owed_count() == 0
    assert [row.id for row in service.store.runnable()] == [a.body["alerts"][0]["incident"]
                                                            for a in (acks[0], acks[1], acks[3])]


def test_one_delivery_whose_journal_cannot_be_written_fails_alone(service):
    good, bad, other = delivery(10), delivery(11), delivery(12)
    # Find where the bad one's journal goes, then block it with a regular file.
    probe = service.intake.accept_together([bad])[0]
    assert not isinstance(probe, BaseException)
    # A fresh service on a fresh state directory, with that incident's directory blocked.
    blocked = Service(config=service.config, secrets=service.secrets, state=service.state.parent / "fresh",
                      world=service.world, playbooks=list(service.playbooks.values()), env={}, sweeper=False)
    target = incident_dir(blocked.state, probe.body["alerts"][0]["incident"])
    target.parent.mkdir(parents=True, mode=0o700)
    target.write_text("not a directory")
    answers = blocked.intake.accept_together([good, bad, other])
    assert isinstance(answers[1], JournalError)
    assert [a.status for a in (answers[0], answers[2])] == [202, 202]
    for ack in (answers[0], answers[2]):
        assert len(alerts_in(blocked, ack.body["alerts"][0]["incident"])) == 1
    assert blocked.store.owed_count() == 1  # the bad one's line is still owed, and its run cannot start
    assert [r.id for r in blocked.store.runnable()] == [answers[0].body["alerts"][0]["incident"],
                                                        answers[2].body["alerts"][0]["incident"]]
    target.unlink()
    retry = blocked.accept(bad)  # the sender retries after the 503: now it is on disk, and answered
    assert retry.status == 200 and retry.body["duplicate"] is True
    assert len(alerts_in(blocked, probe.body["alerts"][0]["incident"])) == 1
    assert blocked.store.owed_count() == 0


def test_a_full_queue_refuses_only_the_deliveries_past_it_and_forgets_them(service):
    answers = service.intake.accept_together([delivery(n) for n in range(5)])  # room for 3
    assert [a.status for a in answers[:3]] == [202, 202, 202]
    assert all(isinstance(a, Busy) for a in answers[3:])
    assert len(service.store.incidents()) == 3
    # Nothing of a refused delivery was kept: once there is room, its retry is new, not a duplicate.
    for row in service.store.runnable():
        service.store.set_state(row.id, "done", 0.0)
    assert service.accept(delivery(3)).status == 202


def test_a_settle_lost_to_a_crash_is_made_again_without_writing_the_line_twice(service):
    # The settle is not waited for on disk: here it is lost outright, as a crash right after the 2xx would.
    [staged] = service.intake.commit_together([delivery(20)])
    incident = staged.incidents[0]
    assert service.intake._write_lines_owed(staged.owed, lambda ids: None) == {}
    assert len(alerts_in(service, incident)) == 1 and service.store.owed_count() == 1
    assert service.store.runnable() == []  # still owed: its run cannot start yet
    service.intake.journal_owed()  # the sweep (or the next start) finds it in the journal: settled only
    assert len(alerts_in(service, incident)) == 1 and service.store.owed_count() == 0
    assert [row.id for row in service.store.runnable()] == [incident]


def test_a_commit_that_need_not_wait_for_the_disk_leaves_the_others_durable(service):
    with service.store.transaction(durable=False) as db:
        assert db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    with service.store.transaction() as db:
        assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL again
