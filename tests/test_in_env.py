"""bin/in-env's chroot: a path means the same inside and out, mounts below it included.

The tests already run inside that chroot, so each one builds the same kind of chroot
again and enters it with bin/env-common.sh's real chroot_exec: in a mount namespace of
its own, a tmpfs is mounted below /tmp or below the repository, and the environment's
root, bound without its mounts as the rootfs is on the host, is the chroot's root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest

from tests import waiting

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="chroot and mount need root, as bin/in-env's rootfs mode does"
    ),
]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# chroot_exec's unshare needs / to be a mount point, which it is on a host but not in
# bin/in-env's chroot: so the test first enters a recursive bind of its own root, in a
# namespace that passes no mount out (inside bin/in-env's chroot / cannot be made
# private, and needs not: that namespace already passes nothing out).
ENTER_A_MOUNTED_ROOT = r"""
set -eu
mount --make-rprivate / 2>/dev/null || true
mount --rbind / /mnt
exec chroot /mnt /bin/bash -c "$0" write-through-chroot-exec "$@"
"""

# $1: the folder to mount a tmpfs in. /mnt is an empty folder of the rootfs.
WRITE_THROUGH_CHROOT_EXEC = r"""
set -eu
base="$1"
cd "$base"
source "$REPO/bin/env-common.sh"
mount --bind / /mnt
mkdir -p "$base/tmpfs"
mount -t tmpfs imgpipe-in-env-test "$base/tmpfs"
chroot_exec /mnt /bin/sh -c 'echo written inside > tmpfs/file; stat -f -c %T tmpfs'
cat "$base/tmpfs/file"
umount "$base/tmpfs"
if [ -e "$base/tmpfs/file" ]; then echo "the file went to the disk below the tmpfs"; fi
"""


# $1: a folder outside /tmp and the repository, which the command is given only as an
# argument (--output=$2/tmpfs: $2 is $1, however spelled), from /, which is not bound. The
# rootfs's own /root (its HOME) is a tmpfs with a marker, which must stay in view.
WRITE_TO_A_PATH_IN_THE_ARGUMENTS = r"""
set -eu
base="$1" spelled="$2"
cd /
source "$REPO/bin/env-common.sh"
mount --bind / /mnt
mount -t tmpfs imgpipe-in-env-test-home /mnt/root
touch /mnt/root/rootfs-home
mkdir -p "$base/tmpfs"
mount -t tmpfs imgpipe-in-env-test "$base/tmpfs"
chroot_exec /mnt /bin/sh -c \
  'out="${1#--output=}"; echo written inside > "$out/file"; stat -f -c %T "$out"
   if [ -e /root/rootfs-home ]; then echo rootfs home kept; fi' \
  sh "--output=$spelled/tmpfs"
cat "$base/tmpfs/file"
umount "$base/tmpfs"
if [ -e "$base/tmpfs/file" ]; then echo "the file went to the disk below the tmpfs"; fi
"""


def run_in_chroot(base: str, script: str = WRITE_THROUGH_CHROOT_EXEC, *args: str) -> str:
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "unchanged", "bash", "-c", ENTER_A_MOUNTED_ROOT]
        + [script, base, *args],
        env={**os.environ, "REPO": REPO},
        capture_output=True,
        text=True,
        timeout=waiting.COMMAND_S,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_tmpfs_below_tmp_is_the_same_tmpfs_inside(tmp_path):
    assert run_in_chroot(str(tmp_path)).splitlines() == ["tmpfs", "written inside"]


def test_a_tmpfs_below_the_repository_is_the_same_tmpfs_inside(tmp_path):
    base = os.path.join(REPO, "build", f"in-env-test-{tmp_path.name}")
    os.makedirs(base)
    try:
        assert run_in_chroot(base).splitlines() == ["tmpfs", "written inside"]
    finally:
        shutil.rmtree(base)


@pytest.mark.parametrize(
    "parent,spelling",
    [("/", "/"), ("/", "/./"), ("/root/", "/root/"), ("/root/", "//root/../root//")],
    ids=["top-folder", "top-folder-dot", "below-root", "below-root-unnormalised"],
)
def test_a_path_in_the_arguments_outside_tmp_and_the_repository_is_the_same_inside(
    parent, spelling
):
    # A top folder of its own, or a folder in /root, which the rootfs keeps as its HOME.
    base = tempfile.mkdtemp(prefix="imgpipe-in-env-test-", dir=parent)
    name = os.path.basename(base)
    try:
        output = run_in_chroot(base, WRITE_TO_A_PATH_IN_THE_ARGUMENTS, spelling + name)
        assert output.splitlines() == ["tmpfs", "rootfs home kept", "written inside"]
    finally:
        shutil.rmtree(base)
