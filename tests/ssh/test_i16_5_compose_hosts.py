"""The Docker Compose playbooks over the real sshd (issue 16, item 5; SOP §6): a stand-in `docker` (and
`curl`) on the node's PATH records every argv it is asked and plays one compose project; the compose
file is a real file on the node, changed by the real shell, `sha256sum`, `cp` and `mv`.

Each test asserts exactly what docker was asked, in order, and what the file holds afterwards.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pydantic
import pytest

from runbook.actions import load_builtin
from runbook.actions.compose import RestartParams, SetArgParams
from runbook.backends.base import World
from runbook.clock import FakeClock, utc
from runbook.engine.operator import AssumeYes
from runbook.engine.runner import Engine
from runbook.record.journal import History, MemoryJournal
from runbook.loading import validation
from runbook.record.locks import MemoryLocks
from runbook.model import events as ev
from runbook.sim.fakes import FakeMetrics
from tests.conftest import assert_sequence

OLD_ID = "3f4a9c0d1e2b" + "0" * 52
NEW_ID = "9b8c7d6e5f4a" + "1" * 52

COMPOSE = """\
# vLLM on one GPU host (SOP section 6), behind nginx
services:
  vllm:
    image: vllm/vllm-openai:v0.6.4
    command: ["--model", "meta-llama/Meta-Llama-3-8B-Instruct", "--max-model-len", "8192",
              "--gpu-memory-utilization", "0.82", "--port", "8000"]   # sized by hand
    ports: ["8000:8000"]
  nginx:
    image: nginx:1.27
"""

DOCKER = r'''#!@PYTHON@
# Stand-in docker: records argv, plays one compose project from state.json in the world directory.
import json, os, re, sys
W = "@WORLD@"
argv = sys.argv[1:]
with open(os.path.join(W, "docker.log"), "a") as log:
    log.write(json.dumps(["docker", *argv]) + "\n")
with open(os.path.join(W, "state.json")) as f:
    st = json.load(f)
def save():
    with open(os.path.join(W, "state.json"), "w") as f:
        json.dump(st, f)
def max_len(path):
    text = open(path).read()
    return re.search(r'"--max-model-len", "(\d+)"', text).group(1)
c = st["container"]
if argv[:2] == ["compose", "-f"] and argv[3:] == ["ps", "--all", "--format", "json", "vllm"]:
    print(json.dumps({"ID": c["id"], "Name": "vllm-vllm-1", "Service": "vllm", "State": c["state"],
                      "Health": c["health"], "Status": "Up 4 days"}))
elif argv[0] == "top" and argv[1] == c["id"]:
    sys.stdout.write(st["top"])
elif argv[0] == "logs" and argv[-1] == c["id"]:
    sys.stderr.write(st["logs"])
elif argv[:2] == ["compose", "-f"] and argv[3:] == ["restart", "vllm"]:
    st["top"], st["healthy"] = st["top_fresh"], True
    save()
    sys.stderr.write(" Container vllm-vllm-1  Restarting\n Container vllm-vllm-1  Started\n")
elif argv[:2] == ["compose", "-f"] and argv[3:] == ["up", "-d", "vllm"]:
    seen = max_len(argv[2])
    if seen != st["running_max_len"]:
        st["running_max_len"] = seen
        c["id"] = st["next_id"]
        st["top"], st["healthy"] = st["top_fresh"], True
    save()
    sys.stderr.write(" Container vllm-vllm-1  Recreated\n Container vllm-vllm-1  Started\n")
else:
    sys.stderr.write("docker: not modelled: %r\n" % argv)
    sys.exit(1)
'''

CURL = r'''#!@PYTHON@
# Stand-in curl: /health answers 200 while the project is healthy, else times out (exit 28).
import json, os, sys
W = "@WORLD@"
with open(os.path.join(W, "docker.log"), "a") as log:
    log.write(json.dumps(["curl", *sys.argv[1:]]) + "\n")
st = json.load(open(os.path.join(W, "state.json")))
if st["healthy"]:
    sys.stdout.write("200 0.003514")
else:
    sys.stderr.write("curl: (28) Operation timed out after 5001 milliseconds with 0 bytes received\n")
    sys.exit(28)
'''

HUNG_TOP = ("PID PPID STAT ELAPSED COMMAND\n"
            "41872 41850 Dsl 345600 python3 -m vllm.entrypoints.openai.api_server --model meta-llama/Meta-Llama-3-8B-Instruct\n"
            "41990 41872 Z 345590 [python3] <defunct>\n")
FRESH_TOP = ("PID PPID STAT ELAPSED COMMAND\n"
             "52011 51990 Ssl 4 python3 -m vllm.entrypoints.openai.api_server --model meta-llama/Meta-Llama-3-8B-Instruct\n")
OOM_LOGS = ("INFO 03-18 09:01:02 engine.py:267] Added request chatcmpl-1.\n"
            "ERROR 03-18 09:01:07 core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
            "ERROR 03-18 09:02:11 core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB\n")


class Node:
    """The node's compose project: the real compose file, the stand-ins' state and what docker was asked."""

    def __init__(self, world: Path):
        self.world = world
        self.file = world / "docker-compose.yml"
        self.file.write_text(COMPOSE)

    def play(self, *, healthy: bool, top: str, logs: str = "") -> None:
        state = {"container": {"id": OLD_ID, "state": "running", "health": ""}, "healthy": healthy, "top": top,
                 "top_fresh": FRESH_TOP, "logs": logs, "running_max_len": "8192", "next_id": NEW_ID}
        (self.world / "state.json").write_text(json.dumps(state))

    @property
    def asked(self) -> list[list[str]]:
        log = self.world / "docker.log"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def backups(self) -> list[Path]:
        return sorted(self.world.glob("docker-compose.yml.runbook-*.bak"))


@pytest.fixture
def node(sshd, world) -> Iterator[Node]:
    made = []
    for name, text in (("docker", DOCKER), ("curl", CURL)):
        script = sshd.base / "bin" / name
        script.write_text(text.replace("@PYTHON@", sys.executable).replace("@WORLD@", str(world)))
        script.chmod(0o755)
        made.append(script)
    yield Node(world)
    for script in made:
        script.unlink()


def bundled(name: str):
    loaded = validation.load_playbook_file(validation.bundled_dir() / f"{name}.yaml", load_builtin())
    assert loaded.playbook is not None, [p.format() for p in loaded.problems]
    return loaded.playbook


def run(name: str, node: Node, nodes, metrics: dict, *, operator=None, dry_run: bool = False):
    journal = MemoryJournal("inc-compose")
    engine = Engine(registry=load_builtin(), world=World(metrics=FakeMetrics(metrics), nodes=nodes),
                    clock=FakeClock(utc(2026, 3, 18, 9, 5, 44)), journal=journal,
                    operator=operator or AssumeYes("alice"), locks=MemoryLocks(), history=History(None, extra=journal),
                    dry_run=dry_run)
    params = {"node": "gpu-node-2", "file": str(node.file)}
    return engine.run(bundled(name), params=params), journal.events()


def compose(node: Node, *rest: str) -> list[str]:
    return ["docker", "compose", "-f", str(node.file), *rest]


PS = ("ps", "--all", "--format", "json", "vllm")


def test_a_hung_vllm_container_is_restarted_once_and_answers_again(node, nodes):
    node.play(healthy=False, top=HUNG_TOP, logs="ERROR 03-18 09:01:07 core.py:700] EngineCore encountered a fatal error.\n")

    def errors(at):
        return 0.0 if ["docker", "compose", "-f", str(node.file), "restart", "vllm"] in node.asked else 17.0

    result, events = run("zombie-process-compose", node, nodes, {"http_503_per_min": errors})
    assert result.outcome == "resolved", result.reason
    health = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{time_total}", "-m", "5",
              "http://127.0.0.1:8000/health"]
    assert node.asked == [
        compose(node, *PS),
        compose(node, *PS), ["docker", "top", OLD_ID, "-eo", "pid,ppid,stat,etimes,args"],
        health,
        compose(node, *PS), ["docker", "logs", "--since", "600s", "--tail", "2000", OLD_ID],
        compose(node, *PS),  # the plan
        compose(node, *PS),  # the same container, right before the restart
        compose(node, "restart", "vllm"),
        health,
    ]
    steps = {s.id: s for s in result.steps}
    assert steps["processes"].result["unhealthy"] == ["vllm"]
    assert "41872 is in state Dsl" in steps["processes"].result["reasons"]["vllm"]
    assert steps["health"].result["reasons"] == {"vllm": "no answer within 5s"}
    assert_sequence(events, [ev.RUN_STARTED, ev.ACTION_PLANNED, ev.GUARD_PASSED, ev.ACTION_CONFIRMED,
                             ev.ACTION_APPLIED, ev.VERIFY_PASSED, ev.RUN_FINISHED],
                    forbidden=(ev.GUARD_REFUSED, ev.ESCALATED, ev.ACTION_FAILED))
    assert node.file.read_text() == COMPOSE


def test_a_healthy_container_is_left_alone(node, nodes):
    node.play(healthy=True, top=FRESH_TOP)
    result, events = run("zombie-process-compose", node, nodes, {"http_503_per_min": 0.0})
    assert ["docker", "compose", "-f", str(node.file), "restart", "vllm"] not in node.asked
    assert not any(e.type == ev.ACTION_APPLIED for e in events)


def test_oom_lowers_max_model_len_in_the_file_and_ups_that_one_service(node, nodes):
    node.play(healthy=True, top=FRESH_TOP, logs=OOM_LOGS)

    def oom(at):
        return 0.0 if compose(node, "up", "-d", "vllm") in node.asked else 6.0

    result, events = run("oom-surge-compose", node, nodes, {"oom_failures_per_min": oom})
    assert result.outcome == "resolved", result.reason
    assert [a for a in node.asked if a[0] == "docker"] == [
        compose(node, *PS),
        compose(node, *PS), ["docker", "logs", "--since", "600s", "--tail", "2000", OLD_ID],
        compose(node, "up", "-d", "vllm"),  # one restart, with the new value: no kill, no restart before it
    ]
    assert node.file.read_text() == COMPOSE.replace('"8192"', '"7373"')  # that one value, comment and all
    (backup,) = node.backups()
    assert backup.read_text() == COMPOSE
    assert backup.name == "docker-compose.yml.runbook-20260318T090544Z.bak"
    steps = {s.id: s for s in result.steps}
    assert steps["oom-logs"].result["matches"] == 2
    (applied,) = [e for e in events if e.type == ev.ACTION_APPLIED]
    assert applied.data["after"]["--max-model-len"] == "7373"
    # under node/: a cluster's Lease for it needs kubernetes.lock_namespace, never a namespace called "compose"
    assert applied.data["target"] == "node/gpu-node-2/compose/vllm"


def test_oom_that_goes_on_restores_the_backup_and_ups_the_service_again(node, nodes):
    node.play(healthy=True, top=FRESH_TOP, logs=OOM_LOGS)
    result, events = run("oom-surge-compose", node, nodes, {"oom_failures_per_min": 6.0})
    assert result.outcome == "rolled_back", result.reason
    assert node.file.read_text() == COMPOSE
    assert [a for a in node.asked if a[4:] == ["up", "-d", "vllm"]] == [compose(node, "up", "-d", "vllm")] * 2
    assert [b.read_text() for b in node.backups()] == [COMPOSE]  # the backup stays for the record
    assert_sequence(events, [ev.ACTION_APPLIED, ev.VERIFY_FAILED, ev.ROLLBACK_APPLIED, ev.RUN_FINISHED],
                    forbidden=(ev.ROLLBACK_FAILED,))


class EditsFirst(AssumeYes):
    """Confirms, but someone edits the compose file by hand just before the first apply."""

    def __init__(self, node: Node):
        super().__init__("alice")
        self.node, self.asked = node, 0

    def confirm(self, request):
        self.asked += 1
        if self.asked == 1:
            self.node.file.write_text(self.node.file.read_text().replace("v0.6.4", "v0.6.5"))
        return super().confirm(request)


def test_a_file_changed_since_the_plan_is_planned_again_never_written_over(node, nodes):
    node.play(healthy=True, top=FRESH_TOP, logs=OOM_LOGS)

    def oom(at):
        return 0.0 if compose(node, "up", "-d", "vllm") in node.asked else 6.0

    operator = EditsFirst(node)
    result, events = run("oom-surge-compose", node, nodes, {"oom_failures_per_min": oom}, operator=operator)
    assert result.outcome == "resolved", result.reason
    assert operator.asked == 2  # the diff changed (the file's hash): asked again
    assert node.file.read_text() == COMPOSE.replace("v0.6.4", "v0.6.5").replace('"8192"', '"7373"')
    assert [b.read_text() for b in node.backups()] == [COMPOSE.replace("v0.6.4", "v0.6.5")]
    assert [a for a in node.asked if a[4:] == ["up", "-d", "vllm"]] == [compose(node, "up", "-d", "vllm")]


def test_a_dry_run_reads_the_file_and_changes_nothing(node, nodes):
    node.play(healthy=True, top=FRESH_TOP, logs=OOM_LOGS)
    result, events = run("oom-surge-compose", node, nodes, {"oom_failures_per_min": 6.0}, dry_run=True)
    assert node.file.read_text() == COMPOSE and node.backups() == []
    assert not any(a[4:5] in (["up"], ["restart"]) for a in node.asked)
    assert not any(e.type == ev.ACTION_APPLIED for e in events)


@pytest.mark.parametrize("field, value", [
    ("service", "vllm;reboot"), ("service", "-vllm"), ("service", "$(id)"),
    ("file", "docker-compose.yml"), ("file", "/opt/vllm/../etc/passwd.yml"), ("file", "/opt/vllm/compose"),
    ("file", "/opt/vllm/a b.yml"), ("file", "/opt/$(id).yml"), ("node", "Host;1"),
])
def test_a_value_that_is_not_a_name_never_reaches_the_node(field, value):
    base = {"node": "gpu-node-2", "file": "/opt/vllm/docker-compose.yml", "service": "vllm"}
    with pytest.raises(pydantic.ValidationError):
        RestartParams.model_validate({**base, field: value})
    with pytest.raises(pydantic.ValidationError):
        SetArgParams.model_validate({**base, field: value, "flag": "--max-model-len", "factor": 0.9})


def test_the_flag_and_its_change_are_checked():
    base = {"node": "gpu-node-2", "file": "/opt/vllm/docker-compose.yml", "service": "vllm"}
    for bad in ({"flag": "--max-model-len;x", "factor": 0.9}, {"flag": "--max-model-len"},
                {"flag": "--max-model-len", "factor": 0.9, "value": 4096}, {"flag": "--max-model-len", "value": "$(id)"}):
        with pytest.raises(pydantic.ValidationError):
            SetArgParams.model_validate({**base, **bad})
