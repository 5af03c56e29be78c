"""Fixtures shared by the release tests: the release tarball's programs."""

import os
import tarfile

import pytest


@pytest.fixture(scope="session")
def release_binaries(tmp_path_factory):
    """torchmond and torchmonctl from the release tarball in
    $TORCHMON_RELEASE_DIR (deploy/release/build.sh's output folder)."""
    release_dir = os.environ.get("TORCHMON_RELEASE_DIR")
    if not release_dir:
        pytest.skip("TORCHMON_RELEASE_DIR is not set")
    [tarball] = [os.path.join(release_dir, f) for f in os.listdir(release_dir)
                 if f.endswith("-linux-x86_64.tar.gz")]
    out = tmp_path_factory.mktemp("tarball")
    with tarfile.open(tarball) as t:
        members = [m for m in t.getmembers() if m.name.endswith(("/bin/torchmond",
                                                                  "/bin/torchmonctl"))]
        t.extractall(out, members=members)
    found = {os.path.basename(m.name): os.path.join(out, m.name) for m in members}
    assert set(found) == {"torchmond", "torchmonctl"}, found
    return found
