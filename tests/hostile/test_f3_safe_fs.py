"""Finding 3: the state tree's primitives create 0700 directories and 0600 files and never follow a link.

Each test plants what a hostile neighbour would (a link, a wide mode, a file owned by someone else)
and checks that the target outside is untouched and the refusal says how to fix it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from runbook.record import safe_fs
from runbook.errors import ExitCode, UnsafeStateDir

AS_ROOT = os.geteuid() == 0
NOBODY = 65534


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_f3_private_dir_creates_every_missing_component_0700(tmp_path):
    deep = tmp_path / "a" / "b" / "c"
    assert safe_fs.private_dir(deep) == deep
    assert [mode_of(p) for p in (tmp_path / "a", tmp_path / "a" / "b", deep)] == [0o700] * 3


def test_f3_private_dir_is_exactly_0700_under_a_wide_umask(tmp_path):
    old = os.umask(0)
    try:
        safe_fs.private_dir(tmp_path / "wide")
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "wide") == 0o700


def test_f3_private_dir_refuses_a_link_where_the_directory_should_be(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "incidents").symlink_to(outside)
    with pytest.raises(OSError) as caught:
        safe_fs.private_dir(tmp_path / "incidents")
    assert caught.value.errno in (errno.ELOOP, errno.ENOTDIR)
    assert str(tmp_path / "incidents") in str(caught.value)


def test_f3_open_private_creates_0600_and_refuses_a_planted_link(tmp_path):
    fd = safe_fs.open_private(tmp_path / "new", os.O_RDWR | os.O_CREAT | os.O_APPEND)
    os.close(fd)
    assert mode_of(tmp_path / "new") == 0o600

    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "planted").symlink_to(victim)
    with pytest.raises(OSError) as caught:
        safe_fs.open_private(tmp_path / "planted", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    assert caught.value.errno == errno.ELOOP
    assert victim.read_bytes() == b"precious"


def test_f3_open_private_refuses_what_is_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError) as caught:
        safe_fs.open_private(tmp_path / "fifo", os.O_RDWR | os.O_CREAT)
    assert "not a regular file" in str(caught.value)


def test_f3_open_private_narrows_a_file_of_ours_left_readable_by_others(tmp_path):
    old = tmp_path / "old.jsonl"
    old.write_bytes(b"")
    old.chmod(0o644)
    os.close(safe_fs.open_private(old, os.O_RDWR))
    assert mode_of(old) == 0o600


def test_f3_write_all_loops_on_short_writes():
    written = bytearray()

    def three_bytes_at_a_time(fd: int, data: bytes) -> int:
        written.extend(bytes(data[:3]))
        return min(3, len(data))

    safe_fs.write_all(7, b"a journal line\n", write=three_bytes_at_a_time)
    assert bytes(written) == b"a journal line\n"


def test_f3_write_all_raises_when_nothing_can_be_written():
    with pytest.raises(OSError):
        safe_fs.write_all(7, b"x", write=lambda fd, data: 0)


def test_f3_check_state_dir_creates_a_missing_one_0700(tmp_path):
    state = tmp_path / "state" / "runbook"
    assert safe_fs.check_state_dir(state) == state
    assert mode_of(state) == 0o700 and mode_of(tmp_path / "state") == 0o700


def test_f3_check_state_dir_accepts_a_private_one_and_a_link_of_ours_to_it(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    assert safe_fs.check_state_dir(real) == real
    assert safe_fs.check_state_dir(tmp_path / "link") == tmp_path / "link"


@pytest.mark.parametrize("mode", [0o1777, 0o777, 0o770, 0o720])
def test_f3_check_state_dir_refuses_a_directory_others_can_write(tmp_path, mode):
    state = tmp_path / "shared"
    state.mkdir()
    state.chmod(mode)
    with pytest.raises(UnsafeStateDir) as caught:
        safe_fs.check_state_dir(state)
    message = str(caught.value)
    assert str(state) in message and f"chmod 700 {state}" in message and oct(mode)[2:] in message
    assert caught.value.exit_code == ExitCode.USAGE


def test_f3_check_state_dir_refuses_a_file(tmp_path):
    (tmp_path / "state").write_text("")
    with pytest.raises(UnsafeStateDir, match="not a directory"):
        safe_fs.check_state_dir(tmp_path / "state")


@pytest.mark.skipif(not AS_ROOT, reason="planting a directory owned by another user needs root")
def test_f3_check_state_dir_refuses_a_directory_owned_by_another_user(tmp_path):
    state = tmp_path / "theirs"
    state.mkdir(mode=0o700)
    os.chown(state, NOBODY, NOBODY)
    with pytest.raises(UnsafeStateDir) as caught:
        safe_fs.check_state_dir(state)
    message = str(caught.value)
    assert str(state) in message and f"uid {NOBODY}" in message and "chown" in message


@pytest.mark.skipif(not AS_ROOT, reason="planting a link owned by another user needs root")
def test_f3_check_state_dir_refuses_a_link_planted_by_another_user(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(UnsafeStateDir) as caught:
        safe_fs.check_state_dir(link)
    assert str(link) in str(caught.value) and "link" in str(caught.value)


def test_f3_check_state_dir_names_where_a_link_of_ours_leads_when_that_is_unsafe(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    (tmp_path / "link").symlink_to(shared)
    with pytest.raises(UnsafeStateDir) as caught:
        safe_fs.check_state_dir(tmp_path / "link")
    assert f"{tmp_path / 'link'} (a link to {shared})" in str(caught.value)
