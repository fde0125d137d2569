"""Files and directories in the state tree that nobody else can steer: 0700 directories, 0600 files.

Nothing here follows a symbolic link planted where a file or directory of ours should be, and a
state directory others could write into is refused with the command that fixes it.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from collections.abc import Callable
from pathlib import Path

from runbook.errors import UnsafeStateDir

DIR_MODE = 0o700
FILE_MODE = 0o600
# Bits that let someone else write, or read what we keep: a file of ours with them is narrowed.
OTHERS = 0o077
OTHERS_WRITE = 0o022


def private_dir(path: Path) -> Path:
    """`mkdir -p` where every component created is 0700; refuses a link (or a file) at `path`."""
    path = Path(path)
    missing: list[Path] = []
    probe = path
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for component in reversed(missing):
        try:
            os.mkdir(component, DIR_MODE)
        except FileExistsError:
            continue  # another process made it first: checked below like any existing directory
        # The umask may have taken bits from the owner too: make it exactly 0700.
        fd = _open_dir(component)
        try:
            os.fchmod(fd, DIR_MODE)
        finally:
            os.close(fd)
        fsync_dir(component.parent)  # the new name survives a crash, like the files later made in it
    os.close(_open_dir(path))
    return path


def _open_dir(path: Path) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path):
            raise OSError(errno.ELOOP, "a symbolic link where a directory should be; remove it", str(path)) from None
        raise


def open_private(path: Path, flags: int) -> int:
    """`os.open` that never follows a link at `path`, creates 0600 and opens regular files only.

    A file of ours left readable by others (by an older version, a wide umask) is narrowed to 0600.
    """
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file; remove it", str(path))
        if info.st_mode & OTHERS and info.st_uid == os.geteuid():
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_all(fd: int, data: bytes, *, write: Callable[[int, bytes], int] = os.write) -> None:
    """Write every byte: `os.write` may write fewer than asked (a signal, a quota, a file size limit)."""
    view = memoryview(data)
    while view:
        written = write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, f"the write stopped with {len(view)} of {len(data)} bytes left")
        view = view[written:]


def write_private(path: Path, data: bytes) -> Path:
    """Replace the contents of the file at `path` (0600, created if missing), never through a link."""
    fd = open_private(path, os.O_WRONLY | os.O_CREAT)
    try:
        os.ftruncate(fd, 0)  # after the checks: a link or a device at `path` is refused untouched
        write_all(fd, data)
    finally:
        os.close(fd)
    return path


def fsync_dir(path: Path) -> None:
    """Make a new name in `path` durable: a crash after a file's fsync can still lose its entry."""
    fd = _open_dir(path)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def reason(exc: OSError) -> str:
    """What went wrong with a file of ours, for a message that says what to do."""
    if exc.errno == errno.ELOOP:
        where = exc.filename or "it"
        return (f"{where} is a symbolic link where a file or folder of runbook's should be (someone planted it): "
                f"remove it, and check who else can write to its folder")
    return exc.strerror or str(exc)


def _who(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name}, uid {uid}"
    except KeyError:
        return f"uid {uid}"


def check_state_dir(path: Path, *, create: bool = True) -> Path:
    """The state directory, created 0700 if missing (unless `create` is false); refused if anyone but us could steer it.

    Refused: a directory writable by group or others (1777 included), one owned by another user,
    and a symbolic link owned by someone other than us or root (its owner could point it elsewhere).
    A link of ours to a directory of ours is fine.
    """
    path = Path(path)
    me = os.geteuid()
    instead = "or point RUNBOOK_STATE_DIR at a directory only you can write"
    try:
        if not os.path.lexists(path):
            if not create:
                return path  # nothing there to read yet, and nothing to refuse
            private_dir(path)
        link = os.lstat(path)
        if stat.S_ISLNK(link.st_mode) and link.st_uid not in (me, 0):
            raise UnsafeStateDir(
                f"the state directory {path} is a symbolic link owned by {_who(link.st_uid)}, not by you "
                f"({_who(me)}): its owner can point it anywhere. Fix: rm {path} && mkdir -m 700 {path}, {instead}")
        info = os.stat(path)
        # Name where a link leads: that directory is the one to fix (chmod and chown follow the link).
        shown = f"{path} (a link to {os.path.realpath(path)})" if stat.S_ISLNK(link.st_mode) else str(path)
    except OSError as exc:
        raise UnsafeStateDir(f"cannot use the state directory {path}: {exc.strerror or exc}. "
                             f"Fix: create it with mkdir -m 700 {path}, {instead}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeStateDir(f"the state directory {shown} is not a directory. Fix: move that file away, {instead}")
    if info.st_uid != me:
        raise UnsafeStateDir(
            f"the state directory {shown} is owned by {_who(info.st_uid)}, not by you ({_who(me)}): its owner "
            f"could plant links in it. Fix: chown {_name(me)} {path} && chmod 700 {path}, {instead}")
    mode = stat.S_IMODE(info.st_mode)
    if mode & OTHERS_WRITE:
        raise UnsafeStateDir(
            f"the state directory {shown} is writable by others (mode {mode:04o}): anyone on this host could "
            f"plant links in it. Fix: chmod 700 {path}, {instead}")
    return path


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
