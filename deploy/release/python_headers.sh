#!/usr/bin/env bash
# The headers of the build machine's Python that differ by architecture
# (pyconfig.h), for TORCHMON_RELEASE_ARCH's (arch.sh), and prints their
# directory:
#
#   deploy/release/python_headers.sh python3.11  ->  $cache/python-headers-<arch>-<version>
#
# configure.sh compiles the Python extension of another architecture than
# the build machine's (aarch64 on x86_64) against the machine's Python
# headers and this pyconfig.h: Debian's libpython3.X-dev of that
# architecture, of the upstream version the machine has installed (the
# archive keeps only the newest Debian revision of it, which the machine
# may not have yet; configure's result is the upstream version's), taken
# from Debian's archive (debian-apt.sh; the archive's signed Release checks
# it). Cached under TORCHMON_RELEASE_CACHE by architecture and upstream
# version.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TORCHMON_RELEASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchmon-release}
# shellcheck source=deploy/release/arch.sh
source "$here/arch.sh"
if (($# != 1)); then
  echo "usage: deploy/release/python_headers.sh python3.X" >&2
  exit 2
fi
python=$1
package=lib$python-dev
version=$(dpkg-query -W -f '${Version}' "$package" 2>/dev/null) || {
  echo "python_headers.sh: $package is not installed (deploy/dev/install-deps.sh --release)" >&2
  exit 1
}
upstream=${version#*:}
upstream=${upstream%-*}
dir=$cache/python-headers-$release_arch-$upstream
if [[ -f $dir/pyconfig.h ]]; then
  echo "$dir"
  exit 0
fi
rm -rf "$dir.tmp"
mkdir -p "$dir.tmp"
# shellcheck source=deploy/release/debian-apt.sh
source "$here/debian-apt.sh"
codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
debian_apt_state "$cache/apt-$codename-$release_debian_arch" deb "$codename" "$codename-updates" \
  "$codename-security"
debian_apt_opts+=(-o "APT::Architecture=$release_debian_arch" -o "APT::Architectures=$release_debian_arch")
apt-get "${debian_apt_opts[@]}" -qq update >&2
# The newest Debian revision of the same upstream version.
candidate=$(apt-cache "${debian_apt_opts[@]}" madison "$package" |
  awk -v up="$upstream" '{ v = $3; sub(/^[0-9]+:/, "", v); sub(/-[^-]*$/, "", v) } v == up { print $3; exit }')
if [[ -z $candidate ]]; then
  echo "python_headers.sh: Debian's archive has no $package $upstream for $release_debian_arch" >&2
  exit 1
fi
echo "python_headers.sh: fetching $package=$candidate ($release_debian_arch; $version here)" >&2
(cd "$dir.tmp" && apt-get "${debian_apt_opts[@]}" -qq download "$package=$candidate" >&2)
dpkg-deb -x "$dir.tmp"/*.deb "$dir.tmp/root"
cp "$dir.tmp/root/usr/include/$release_arch-linux-gnu/$python/pyconfig.h" "$dir.tmp/"
rm -rf "$dir.tmp/root" "$dir.tmp"/*.deb
mv "$dir.tmp" "$dir"
echo "$dir"
