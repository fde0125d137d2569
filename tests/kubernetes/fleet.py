"""A pretend vLLM fleet on the test API server: what its containers answer to exec, what /health
says and what Prometheus would report, all read from the cluster's state when asked.

So a remediation applied through the real backend changes what the next diagnostic and the
verification see: nothing here is a canned "it worked".
"""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Mapping, Sequence

from runbook.backends.base import HttpResponse, Sample, Series
from runbook.errors import BackendUnavailable
from tests.kubernetes.apiserver.controllers import is_ready
from tests.kubernetes.apiserver.kubelet import ExecAnswer, ProcRow, proc_answer
from tests.kubernetes.apiserver.server import ApiServer

OOM_ABOVE = 7000  # --max-model-len above this runs out of GPU memory under the test's load
PID = 7


def _proc_net_tcp(ports: Sequence[int]) -> str:
    rows = ["  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"]
    for i, port in enumerate(ports):
        rows.append(f"   {i}: 00000000:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0"
                    f"        0 {4000 + i} 1 0000000000000000 100 0 0 10 0")
    return "\n".join(rows) + "\n"


def _ps(hung: bool) -> str:
    server = ("python3 -m vllm.entrypoints.openai.api_server" if not hung
              else "[python3] <defunct>")
    return ("    PID    PPID STAT ELAPSED COMMAND\n"
            "      1       0 Ss       812 /bin/sh /entrypoint.sh\n"
            f"      {PID}       1 {'Z' if hung else 'Sl'}      810 {server}\n")


class Fleet:
    def __init__(self, server: ApiServer, *, namespace: str = "llm", app: str = "vllm-server", memory_report: str = ""):
        self.server, self.namespace, self.app = server, namespace, app
        self.memory_report = memory_report
        self.hung: set[str] = set()  # uids of pods whose vLLM process is defunct
        self.killed: list[str] = []  # pods whose server process was signalled
        server.kubelet.handlers.append(self._exec)

    def pods(self) -> list[dict]:
        return [p for p in self.server.pods(self.namespace) if p["metadata"]["labels"].get("app") == self.app]

    def hang(self, name: str) -> None:
        """This pod's vLLM process goes defunct (its replacement, a new uid, will be fine)."""
        self.hung.add(self.server.get("Pod", self.namespace, name)["metadata"]["uid"])

    @staticmethod
    def max_model_len(pod: dict) -> int:
        args = pod["spec"]["containers"][0].get("args", [])
        for i, arg in enumerate(args):
            if arg == "--max-model-len":
                return int(args[i + 1])
            if arg.startswith("--max-model-len="):
                return int(arg.split("=", 1)[1])
        return 0

    # -- the containers --------------------------------------------------------------------

    def _exec(self, pod: dict, container: str, argv: tuple[str, ...]) -> ExecAnswer | None:
        if pod["metadata"]["labels"].get("app") != self.app:
            return None
        hung = pod["metadata"]["uid"] in self.hung
        if argv == ("cat", "/proc/net/tcp"):
            return ExecAnswer(stdout=_proc_net_tcp([] if hung else [8000]))
        if argv[:1] == ("ps",):
            return ExecAnswer(stdout=_ps(hung))
        if argv[:2] == ("pgrep", "-f"):
            return ExecAnswer(stdout=f"{PID}\n")
        # each pod's server started at its own time: a replaced pod's PID 7 is another process
        server = ProcRow("python3", "Z" if hung else "S", 1, 300_000_000 + zlib.crc32(pod["metadata"]["uid"].encode()) % 10**7)
        answer = proc_answer(argv, {PID: server}, lambda pid, sig: self.killed.append(pod["metadata"]["name"]))
        if answer is not None:
            return answer
        if argv[:1] == ("pkill",):
            self.killed.append(pod["metadata"]["name"])
            return ExecAnswer()
        if argv == ("nvidia-smi", "-q", "-d", "MEMORY") and self.memory_report:
            return ExecAnswer(stdout=self.memory_report)
        return None

    # -- Prometheus (the Metrics protocol) -------------------------------------------------

    def _per_pod(self, signal: str) -> dict[str, float] | None:
        pods = self.pods()
        ready = [p for p in pods if is_ready(p)]
        if signal == "waiting_requests":
            backlog = len(ready) < len(pods)  # the ready pods take the unready ones' share and fall behind
            return {p["metadata"]["name"]: (60.0 if backlog else 5.0) if is_ready(p) else 0.0 for p in pods}
        if signal == "oom_failures_per_min":
            return {p["metadata"]["name"]: 4.0 if self.max_model_len(p) > OOM_ABOVE else 0.0 for p in pods}
        if signal == "http_503_per_min":
            return {p["metadata"]["name"]: 12.0 if p["metadata"]["uid"] in self.hung else 0.0 for p in pods}
        return None  # a signal this fleet does not export: no data

    def query(self, signal: str, *, at: dt.datetime, labels: Mapping[str, str] = {},
              by: Sequence[str] = ()) -> list[Sample]:
        values = self._per_pod(signal)
        if values is None or not values:
            return []
        if not by:
            return [Sample({}, sum(values.values()))]
        if list(by) == ["pod"]:
            return [Sample({"pod": name}, value) for name, value in sorted(values.items())]
        return []

    def query_range(self, signal: str, *, start: dt.datetime, end: dt.datetime, step_seconds: float,
                    labels: Mapping[str, str] = {}, by: Sequence[str] = ()) -> list[Series]:
        now = self.query(signal, at=end, labels=labels, by=by)
        steps = int((end - start).total_seconds() // step_seconds) + 1
        times = [start + dt.timedelta(seconds=i * step_seconds) for i in range(steps)]
        return [Series(s.labels, tuple((t, s.value) for t in times)) for s in now]

    # -- /health (the Http protocol) -------------------------------------------------------

    def get(self, url: str, *, timeout: float) -> HttpResponse:
        pod = next((p for p in self.pods() if f"//{p['status'].get('podIP')}:" in url), None)
        if pod is None or pod["metadata"]["uid"] in self.hung:
            raise BackendUnavailable(f"GET {url} timed out after {timeout:g}s")
        return HttpResponse(200, 0.004, "")
