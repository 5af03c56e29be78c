"""Puts tests/python (torchmon_testing: the real-daemon helper) on sys.path."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
