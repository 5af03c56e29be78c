#!/usr/bin/env bash
# Makes (or reuses) a cached minimal Debian root for the release tests and
# prints its path on stdout; progress goes to stderr.
#
#   tests/release/roots.sh bullseye       # minbase: apt, passwd, glibc 2.31
#   tests/release/roots.sh bullseye-cxx   # minbase + g++ 10, cmake, make, pkg-config
#   tests/release/roots.sh trixie         # minbase + python3, python3-venv
#   tests/release/roots.sh trixie-torch   # + python3-torch 2.6, libtorch-dev 2.6, pytest, g++, pkg-config, GoogleTest
#   tests/release/roots.sh trixie-receivers  # minbase + Prometheus 2.53, VictoriaMetrics 1.112 (push receivers)
#
# Cache: ${TORCHMON_RELEASE_CACHE:-$HOME/.cache/torchmon-release}/roots/
#   <name>-<hash>/root    the root (printed)
#   <name>-<hash>/ready   written last, before the atomic rename
# <hash> is of this script without its comments and its table of roots,
# and of the root's own line in it: changing the recipe makes new roots,
# adding a root to the table does not rebuild the others. The mirror is no
# part of it: debootstrap checks every package against the archive's
# signatures, whichever host served it. A root is built in
# <name>-<hash>.tmp.<pid> and renamed into place, under a lock, so a
# half-built root is never used. Never modify a cached root: the tests work
# on throwaway overlays of it.
#
# Needs root, debootstrap and Debian's archive: the Debian mirror of this
# machine's apt sources, or TORCHMON_DEBIAN_MIRROR, or for a release Debian
# has moved to its archive of old releases TORCHMON_DEBIAN_ARCHIVE
# (deploy/release/debian-apt.sh says how each is found).
set -euo pipefail
# shellcheck source=deploy/release/debian-apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../deploy/release/debian-apt.sh"

DEBOOTSTRAP=${DEBOOTSTRAP:-/usr/sbin/debootstrap}

# The table of roots. NAME) SUITE PACKAGES (debootstrap --include, or -), and
# a command the finished root must run (its /proc mounted): what the tests
# rely on.
usage() { echo "usage: $0 bullseye|bullseye-cxx|trixie|trixie-torch|trixie-receivers" >&2; exit 2; }
[[ $# -eq 1 ]] || usage
name=$1
case "$name" in
  bullseye)     recipe="bullseye -"
                check="getent passwd root" ;;
  bullseye-cxx) recipe="bullseye g++,cmake,make,pkg-config"
                check="g++ --version && cmake --version && pkg-config --version" ;;
  trixie)       recipe="trixie python3,python3-venv"
                check="python3 -c 'import ensurepip, venv'" ;;
  trixie-torch) recipe="trixie python3,python3-venv,python3-torch,python3-pytest,libtorch-dev,g++,make,pkg-config,libgtest-dev,libgmock-dev"
                check="python3 -c 'import torch.monitor, pytest, venv' && g++ --version && pkg-config --version && test -f /usr/include/gmock/gmock.h" ;;
  trixie-receivers) recipe="trixie prometheus,victoria-metrics"
                check="prometheus --version && victoria-metrics --version" ;;
  *) usage ;;
esac  # end of the table of roots
read -r suite include <<<"$recipe"
[[ $include != - ]] || include=""

log() { echo "roots.sh[$name]: $*" >&2; }

[[ $(id -u) -eq 0 ]] || { log "must run as root (debootstrap, chroot)"; exit 1; }
[[ -x $DEBOOTSTRAP ]] || { log "debootstrap not found at $DEBOOTSTRAP"; exit 1; }

cache=${TORCHMON_RELEASE_CACHE:-$HOME/.cache/torchmon-release}
# The recipe: this script without its comments and its table, and this
# root's line of the table.
hash=$( (sed -e '/^# The table of roots/,/^esac  # end of the table of roots$/d' -e '/^ *#/d' \
           "${BASH_SOURCE[0]}"; echo "$recipe"; echo "$check") | sha256sum | cut -c1-12)
entry="$cache/roots/$name-$hash"
mkdir -p "$cache/roots"

if [[ -f $entry/ready ]]; then
  log "cached: $entry/root"
  echo "$entry/root"
  exit 0
fi

# One builder per root; a second caller waits, then finds it ready.
exec 9>"$entry.lock"
flock 9
if [[ -f $entry/ready ]]; then
  log "cached (built meanwhile): $entry/root"
  echo "$entry/root"
  exit 0
fi

# Deletes a build folder: first unmounts what debootstrap may have left
# mounted in it (it mounts proc and sys in the target), deepest first, then
# removes it without crossing into another filesystem.
remove_build() {
  local m
  awk -v p="$1/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r |
    while read -r m; do umount -l "$m" || true; done
  rm -rf --one-file-system "$1"
}

tmp="$entry.tmp.$$"
trap '[[ -d $tmp ]] && remove_build "$tmp"' EXIT
# Leftovers of builders that died (their pid is gone).
for old in "$entry".tmp.*; do
  [[ -e $old ]] || continue
  if ! kill -0 "${old##*.tmp.}" 2>/dev/null; then
    log "removing stale $old"
    remove_build "$old"
  fi
done

debian_mirror "$suite"
mkdir -p "$tmp"
start=$SECONDS
args=(--variant=minbase)
[[ -n $include ]] && args+=("--include=$include")
log "debootstrap ${args[*]} $suite $tmp/root $debian_main"
"$DEBOOTSTRAP" "${args[@]}" "$suite" "$tmp/root" "$debian_main" >"$tmp/debootstrap.log" 2>&1 || {
  log "debootstrap failed; last lines of its log:"
  tail -n 30 "$tmp/debootstrap.log" >&2
  exit 1
}
# Downloaded .debs are not needed; the package lists were never fetched, so
# apt inside the root can only install local files (that is what we want:
# a missing dependency fails instead of being downloaded).
rm -f "$tmp/root/var/cache/apt/archives/"*.deb

# Sanity: apt and the table's check.
chroot "$tmp/root" /usr/bin/apt-get --version >/dev/null
mount -t proc proc "$tmp/root/proc"
if ! chroot "$tmp/root" /bin/sh -c "$check" >/dev/null; then
  log "the new root fails its check: $check"
  exit 1
fi
umount "$tmp/root/proc"

{
  echo "name=$name"
  echo "suite=$suite"
  echo "recipe=$hash"
  echo "mirror=$debian_main"
  echo "include=$include"
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "seconds=$((SECONDS - start))"
} >"$tmp/ready"
mv -T "$tmp" "$entry"
trap - EXIT
log "built in $((SECONDS - start)) s, $(du -sh --one-file-system "$entry/root" | cut -f1): $entry/root"
echo "$entry/root"
