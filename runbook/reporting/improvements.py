"""Improvements by horizon: what the run's own changes leave to do, then the playbook's; each once.

An item is dropped when an earlier one already says it: the same content words, no new number
("Make the lowered --max-model-len permanent" after "Make `--max-model-len` 6635 permanent …").
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from runbook.model import events as ev

HORIZONS = ("short", "mid", "long")
COVERED = 0.75  # the share of an item's content words an earlier item must hold to say the same
STOPWORDS = frozenset("a an and as at be by for from in into is it its of on once or the to was were with".split())


def _words(item: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9][a-z0-9._/-]*", item.lower().replace("`", "")) if w not in STOPWORDS}


def _said_by(item: str, earlier: str) -> bool:
    mine, theirs = _words(item), _words(earlier)
    if not mine:
        return item.strip().lower() == earlier.strip().lower()
    if any(w[0].isdigit() and w not in theirs for w in mine):
        return False  # a number of its own: a different threshold, size or count
    return len(mine & theirs) / len(mine) >= COVERED


def prefilled(applied: Sequence[ev.Event], short: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """What each applied change leaves to do once the incident is over. `short`: the workloads the run
    left with fewer replicas, as the engine journaled them when it ended (issue 34)."""
    out = []
    left = {c["target"]: c for c in short}
    for e in applied:
        action, after, target = e.data.get("action"), e.data.get("after") or {}, e.data.get("target")
        if action == "k8s.set_arg":
            for flag, value in after.items():
                out.append(f"Make `{flag}` {value} permanent in the manifest of {target} (it was patched live)")
        elif action == "k8s.scale" and target in left:
            # Still short when the run ended: the commands that finish it.
            c = left.pop(target)
            commands = " && ".join(f"`{command}`" for command in c.get("restore", ()))
            out.append(f"Bring {target} back to its {c['before']} replicas once it is safe (it serves "
                       f"{c['now']})" + (f": {commands}" if commands else ""))
        elif action == "k8s.scale" and "capacity" not in e.data:
            out.append(f"Scale {target} back to its normal replica count once stable (now {after.get('replicas')})")
        elif action == "k8s.delete_pod":
            out.append(f"Find why {', '.join(e.data.get('before', {}).get('pods', []))} hung (see the evidence)")
        elif action == "node.kill_pids":
            out.append(f"Find why PID {', '.join(map(str, after.get('pids', [])))} outlived its container")
    return out


def by_horizon(applied: Sequence[ev.Event], playbooks: Sequence[Mapping[str, Any]],
               short: Sequence[Mapping[str, Any]] = ()) -> dict[str, list[str]]:
    """{short, mid, long} → items: the changes' own first, then each run's playbook list, none twice."""
    kept: dict[str, list[str]] = {h: [] for h in HORIZONS}
    every: list[str] = []
    offered = [("short", item) for item in prefilled(applied, short)]
    for lists in playbooks:
        offered += [(h, str(item)) for h in HORIZONS for item in (lists.get(h) or [])]
    for horizon, item in offered:
        if any(_said_by(item, earlier) for earlier in every):
            continue
        every.append(item)
        kept[horizon].append(item)
    return kept
