"""Upstream's torch.monitor cases (tests/python/test_monitor_mirror.py)
with the aarch64 wheel and tarball daemon, in the arm64 trixie root with
Debian's arm64 python3-torch 2.6, under emulation: test_torch26.py's run
for x86_64, in a file of its own so that CI runs it in a pytest process of
its own, beside the other release tests (deploy/dev/test.sh).

    TORCHMON_RELEASE_DIR=OUT /usr/bin/python3 -m pytest tests/release/test_torch26_aarch64.py -v
"""

import pytest
from test_roots import RELEASE_DIR

if not RELEASE_DIR:  # test_roots skips its module; this one must skip too
    pytest.skip("TORCHMON_RELEASE_DIR is not set", allow_module_level=True)

from test_torch26 import SUITES, mirror_and_dropin_against_torch_2_6  # noqa: E402


def test_upstreams_torch_monitor_cases_pass_with_the_aarch64_wheel_against_torch_2_6():
    mirror_and_dropin_against_torch_2_6("aarch64", SUITES[:1])
