"""The remote commands of the `compose.*` actions, as argv lists, each value checked before it goes in:
one place that the actions build them and the simulated world recognises them.

The SSH backend quotes every argv with shlex.join; the two file scripts are fixed text and take every
value as a positional parameter, so nothing from a compose file, an alert or a param is ever script text.
"""

from __future__ import annotations

import re

from runbook.errors import InvalidInput

SERVICE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}")  # Compose's own rule for service names
# An absolute path of plain characters ending in .yml/.yaml; no `..`, no option-looking word.
FILE = re.compile(r"/(?:[A-Za-z0-9_+@-][A-Za-z0-9_.+@-]*/)*[A-Za-z0-9_+@-][A-Za-z0-9_.+@-]*\.ya?ml")
BACKUP = re.compile(r"/[A-Za-z0-9_./+@-]+\.bak")
CONTAINER_ID = re.compile(r"[0-9a-f]{12,64}")
HEALTH_PATH = re.compile(r"/[A-Za-z0-9_./-]{0,127}")
SHA256 = re.compile(r"[0-9a-f]{64}")
PS_FIELDS = "pid,ppid,stat,etimes,args"


def check_service(value: object) -> str:
    if not isinstance(value, str) or not SERVICE.fullmatch(value):
        raise InvalidInput(f"{value!r} is not a Compose service name (letters, digits, '_', '.' and '-')")
    return value


def _plain_path(value: object, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value) or any(
            part in (".", "..") for part in value.split("/")):
        raise InvalidInput(f"{what} {value!r} must be an absolute path ending in "
                           f"{'.yml or .yaml' if pattern is FILE else '.bak'}, of letters, digits and _ . + @ - (no '..')")
    return value


def check_file(value: object) -> str:
    return _plain_path(value, FILE, "compose file")


def check_container_id(value: object) -> str:
    if not isinstance(value, str) or not CONTAINER_ID.fullmatch(value):
        raise InvalidInput(f"container id {value!r} is not hexadecimal")
    return value


def compose_argv(file: str, *rest: str) -> list[str]:
    return ["docker", "compose", "-f", check_file(file), *rest]


def ps_argv(file: str, service: str) -> list[str]:
    return compose_argv(file, "ps", "--all", "--format", "json", check_service(service))


def restart_argv(file: str, service: str) -> list[str]:
    return compose_argv(file, "restart", check_service(service))


def up_argv(file: str, service: str) -> list[str]:
    return compose_argv(file, "up", "-d", check_service(service))


def docker_restart_argv(container_id: str) -> list[str]:
    return ["docker", "restart", check_container_id(container_id)]


def top_argv(container_id: str) -> list[str]:
    return ["docker", "top", check_container_id(container_id), "-eo", PS_FIELDS]


def logs_argv(container_id: str, since_seconds: int, tail: int) -> list[str]:
    if not (isinstance(since_seconds, int) and since_seconds > 0 and isinstance(tail, int) and tail > 0):
        raise InvalidInput(f"docker logs --since {since_seconds!r} --tail {tail!r}: both must be positive whole numbers")
    return ["docker", "logs", "--since", f"{since_seconds}s", "--tail", str(tail), check_container_id(container_id)]


def health_argv(port: int, path: str, seconds: float) -> list[str]:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535 \
            or not isinstance(path, str) or not HEALTH_PATH.fullmatch(path) or not 0 < seconds <= 600:
        raise InvalidInput(f"health check http://127.0.0.1:{port}{path} within {seconds}s is not a port, "
                           f"a plain path and a time limit")
    return ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{time_total}", "-m", f"{seconds:g}",
            f"http://127.0.0.1:{port}{path}"]


def cat_argv(file: str) -> list[str]:
    return ["cat", check_file(file)]


# Exit 3: the file is not what the plan read (stale). Exit 4: the backup path is taken.
WRITE_SCRIPT = r'''set -eu
f=$1 want=$2 backup=$3 new=$4
have=$(sha256sum < "$f"); have=${have%% *}
if [ "$have" != "$want" ]; then echo "runbook: $f changed since the plan (sha256 $have, planned $want)" >&2; exit 3; fi
if [ -e "$backup" ]; then echo "runbook: backup $backup already exists" >&2; exit 4; fi
cp -p -- "$f" "$backup"
tmp=$f.runbook-tmp
printf '%s' "$new" > "$tmp"
chmod --reference="$f" -- "$tmp" 2>/dev/null || true
mv -f -- "$tmp" "$f"
'''
# Exit 0 without a change when the file is the original already; 3 when someone changed it after runbook.
RESTORE_SCRIPT = r'''set -eu
f=$1 written=$2 backup=$3 original=$4
have=$(sha256sum < "$f"); have=${have%% *}
if [ "$have" = "$original" ]; then exit 0; fi
if [ "$have" != "$written" ]; then echo "runbook: $f changed since runbook wrote it (sha256 $have); restore $backup by hand" >&2; exit 3; fi
kept=$(sha256sum < "$backup"); kept=${kept%% *}
if [ "$kept" != "$original" ]; then echo "runbook: backup $backup is not the file runbook replaced" >&2; exit 4; fi
tmp=$f.runbook-tmp
cp -p -- "$backup" "$tmp"
mv -f -- "$tmp" "$f"
'''


def _hash(value: str) -> str:
    if not isinstance(value, str) or not SHA256.fullmatch(value):
        raise InvalidInput(f"{value!r} is not a sha256")
    return value


def write_argv(file: str, planned_sha256: str, backup: str, new_text: str) -> list[str]:
    if "\0" in new_text:
        raise InvalidInput("the new compose file holds a NUL byte")
    return ["sh", "-c", WRITE_SCRIPT, "sh", check_file(file), _hash(planned_sha256),
            _plain_path(backup, BACKUP, "backup"), new_text]


def restore_argv(file: str, written_sha256: str, backup: str, original_sha256: str) -> list[str]:
    return ["sh", "-c", RESTORE_SCRIPT, "sh", check_file(file), _hash(written_sha256),
            _plain_path(backup, BACKUP, "backup"), _hash(original_sha256)]
