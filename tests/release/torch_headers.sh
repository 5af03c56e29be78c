#!/usr/bin/env bash
# torch::monitor's C++ headers of one Debian pytorch source version, which
# Debian's libtorch-dev does not ship (its library has the symbols):
#
#   tests/release/torch_headers.sh SUITE VERSION   ->  DIR (DIR/torch/csrc/monitor/*.h)
#
# From Debian's source package of that version (apt-get source with a private
# apt state for SUITE's deb-src, from deploy/release/debian-apt.sh: the Debian
# mirror of this machine's apt sources, or TORCHMON_DEBIAN_MIRROR; the
# archive's signed index checks it), only
# torch/csrc/monitor/ taken out of the orig tarball. Cached under
# ${TORCHMON_RELEASE_CACHE:-~/.cache/torchmon-release}/torch-headers-VERSION.
set -euo pipefail
if (($# != 2)); then
  echo "usage: tests/release/torch_headers.sh SUITE VERSION" >&2
  exit 2
fi
suite=$1 version=$2
cache=${TORCHMON_RELEASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchmon-release}
dir=$cache/torch-headers-$version
if [[ -f $dir/ready ]]; then
  echo "$dir"
  exit 0
fi
# shellcheck source=deploy/release/debian-apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../deploy/release/debian-apt.sh"
debian_apt_state "$cache/apt-src-$suite" deb-src "$suite"
opts=("${debian_apt_opts[@]}")
rm -rf "$dir" "$dir.tmp"
mkdir -p "$dir.tmp/download"
echo "torch_headers.sh: fetching pytorch $version's sources ($suite)" >&2
apt-get "${opts[@]}" -qq update >&2
(cd "$dir.tmp/download" && apt-get "${opts[@]}" -qq --download-only source "pytorch=$version" >&2)
tar -xf "$dir.tmp"/download/pytorch_*.orig.tar.* -C "$dir.tmp" --strip-components=1 \
  --wildcards '*/torch/csrc/monitor/*.h'
rm -rf "$dir.tmp/download"
ls "$dir.tmp/torch/csrc/monitor/counters.h" "$dir.tmp/torch/csrc/monitor/events.h" >/dev/null
touch "$dir.tmp/ready"
mv "$dir.tmp" "$dir"
echo "$dir"
