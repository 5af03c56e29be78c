#!/usr/bin/env bash
# tests/python once more with the module from the wheel instead of the build
# tree, one CTest entry per file like the suite itself (tests/wheel/CMakeLists.txt):
#
#   suite_from_wheel.sh venv VENV WHEEL_DIR   Debian's python3 in a fresh venv
#                                             that sees its packages (torch,
#                                             grpcio, pytest), the wheel
#                                             installed with plain pip
#   suite_from_wheel.sh run VENV TEST_FILE    that file's tests under it
set -euo pipefail
mode=$1 venv=$2
unset PYTHONPATH  # the build tree's module must not be found
work=$(mktemp -d)  # the current directory must not provide one either
trap 'rm -rf "$work"' EXIT
cd "$work"
case $mode in
  venv)
    wheels=("$3"/torchmon-*.whl)
    if ((${#wheels[@]} != 1)) || [[ ! -f ${wheels[0]} ]]; then
      echo "suite_from_wheel.sh: expected one wheel in $3, found: ${wheels[*]}" >&2
      exit 1
    fi
    rm -rf "$venv"
    /usr/bin/python3 -m venv --system-site-packages "$venv"
    "$venv/bin/python" -m pip install --no-index --disable-pip-version-check "${wheels[0]}"
    ;;
  run)
    site=$("$venv/bin/python" -c 'import os, torchmon; print(os.path.dirname(os.path.dirname(torchmon.__file__)))')
    if [[ $site != "$venv"/* ]]; then
      echo "suite_from_wheel.sh: torchmon comes from $site, not from the venv $venv" >&2
      exit 1
    fi
    TORCHMON_PYTHON_DIR=$site "$venv/bin/python" -m pytest -q -p no:cacheprovider "$3"
    ;;
  *)
    echo "usage: suite_from_wheel.sh venv VENV WHEEL_DIR | run VENV TEST_FILE" >&2
    exit 2
    ;;
esac
