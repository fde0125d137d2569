#!/usr/bin/env python3
"""A tool inside a kwok pod (`nvidia-smi`, `ps`, `ss`, `fuser`, `kill`, …): prints what the test
wrote for it in that pod, records the call, and exits as the test said.

kubeletfront runs it for an exec into a pod, with RUNBOOK_STANDIN_DIR, RUNBOOK_POD_NAMESPACE and
RUNBOOK_POD_NAME set. The answer is the JSON file `DIR/NS/POD/exec/TOOL.json` (else
`DIR/NS/_any/exec/TOOL.json`): {"stdout", "stderr", "exit_code", "sleep"}; each call is appended to
`DIR/NS/POD/calls.jsonl` (`DIR/NS/_any/calls.jsonl` for a pod with no folder of its own). A tool
with no answer exits 127.
While `DIR/oracle.url` names one, a simulated world answers instead (tests/controlplane/drills.py).
"""

import json
import os
import sys
import time
from pathlib import Path

tool = os.path.basename(sys.argv[0])
root = Path(os.environ["RUNBOOK_STANDIN_DIR"]) / os.environ.get("RUNBOOK_POD_NAMESPACE", "_none")
pod = os.environ.get("RUNBOOK_POD_NAME", "_any")
recorded = next((root / where / "calls.jsonl" for where in (pod, "_any") if (root / where).is_dir()), os.devnull)
with open(recorded, "a", encoding="utf-8") as calls:
    calls.write(json.dumps({"argv": [tool, *sys.argv[1:]], "at": time.time(), "pod": pod}) + "\n")
oracle = Path(os.environ["RUNBOOK_STANDIN_DIR"]) / "oracle.url"
if oracle.is_file():
    import urllib.request

    asked = json.dumps({"namespace": os.environ.get("RUNBOOK_POD_NAMESPACE"), "pod": pod,
                        "argv": [tool, *sys.argv[1:]]}).encode()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(urllib.request.Request(oracle.read_text().strip(), data=asked), timeout=60) as reply:
        answer = json.loads(reply.read())
else:
    answer = None
for where in (root / pod / "exec" / f"{tool}.json", root / "_any" / "exec" / f"{tool}.json"):
    if answer is not None:
        break
    if where.is_file():
        answer = json.loads(where.read_text(encoding="utf-8"))
        break
else:
    sys.stderr.write(f"{tool}: executable file not found in $PATH\n")
    sys.exit(127)
if answer.get("sleep"):
    time.sleep(float(answer["sleep"]))
sys.stdout.write(answer.get("stdout", ""))
sys.stderr.write(answer.get("stderr", ""))
sys.stdout.flush()
sys.exit(int(answer.get("exit_code", 0)))
