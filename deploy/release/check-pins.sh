#!/usr/bin/env bash
# Says, for each Debian source package deps.lock and snappy.lock pin, the
# newest revision Debian bookworm publishes (bookworm, -updates and
# -security, as deps.sh fetches them), and fails if a pin is older: a
# bundled library must carry every fix Debian ships for it
# (docs/install.md, "What is bundled"). Run it before a release, and when
# Debian announces a security update of one of them (DSA/DLA). Nothing is
# changed: bump the pin and rebuild (deps.sh keys its cache by deps.lock).
#
#   deploy/release/check-pins.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=deploy/release/debian-apt.sh
source "$here/debian-apt.sh"
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
debian_apt_state "$state" deb-src bookworm bookworm-updates bookworm-security
apt-get "${debian_apt_opts[@]}" -qq update >&2
status=0
while read -r _ name pinned; do
  # The highest of the versions published, in Debian's order.
  newest=
  for v in $(apt-cache "${debian_apt_opts[@]}" showsrc "$name" 2>/dev/null |
    awk '$1 == "Version:" { print $2 }'); do
    if [[ -z $newest ]] || dpkg --compare-versions "$v" gt "$newest"; then newest=$v; fi
  done
  if [[ -z $newest ]]; then
    echo "$name: pinned $pinned; Debian bookworm publishes no such source package" >&2
    status=1
  elif dpkg --compare-versions "$pinned" lt "$newest"; then
    echo "$name: pinned $pinned; Debian bookworm has $newest: bump the pin" >&2
    status=1
  else
    echo "$name: pinned $pinned, the newest in bookworm"
  fi
done < <(grep -h "^source " "$here/deps.lock" "$here/snappy.lock")
exit $status
