"""The shared real-daemon helper (tests/python/torchmon_testing.py)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
