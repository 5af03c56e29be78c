#!/usr/bin/env bash
# Makes (or reuses) a cached minimal Debian root for the release tests and
# prints its path on stdout; progress goes to stderr.
#
#   tests/release/roots.sh bullseye       # minbase: apt, passwd, glibc 2.31
#   tests/release/roots.sh bullseye-cxx   # bullseye + g++ 10, cmake, make, pkg-config
#   tests/release/roots.sh trixie         # minbase + python3, python3-venv
#   tests/release/roots.sh trixie-torch   # trixie + python3-torch 2.6, libtorch-dev 2.6, pytest, g++, pkg-config, GoogleTest
#   tests/release/roots.sh trixie-receivers  # trixie + Prometheus 2.53, VictoriaMetrics 1.112 (push receivers)
#   tests/release/roots.sh NAME-arm64     # the same root of Debian's arm64 packages (bullseye-arm64,
#                                         # bullseye-cxx-arm64, trixie-arm64, trixie-torch-arm64, ...;
#                                         # trixie-arm64 made from trixie-minbase-arm64)
#
# An arm64 root runs under emulation: qemu-user-static's qemu-aarch64,
# registered with binfmt_misc (mounted and registered here, as root, if it
# is not: the kernel then runs every aarch64 program through it, in a
# chroot too). Slow (a program runs 5 to 20 times slower than natively), so
# the tests only prove there what emulation can: that the aarch64 artefacts
# install, run and answer exactly; never their speed. Most of an emulated
# apt install was Python byte-compiling what it installed (py3compile in
# each package's postinst: python3-torch's dependencies are tens of
# thousands of files), so in a root made from another with apt, py3compile
# is a no-op during the install, and the same files are compiled after it
# by the amd64 root of the same suite's python3, natively (a .pyc depends on
# Python's version, not on the machine; each records its source's path as
# the arm64 root sees it). Python's own standard library likewise: its
# packages' postinst runs py_compile.py over it, which stands diverted during
# the install (so trixie-arm64 is trixie's python3 installed by apt into an
# arm64 minbase, not by debootstrap, which would configure it emulated). And
# each package of such an install is unpacked by this machine's dpkg-deb:
# the root's dpkg still places the files and runs the maintainer scripts.
# And the CPU emulated is qemu's "max" with its cheap pointer
# authentication (below). Made one after the other, nothing else running:
# bullseye-arm64 68 CPU s, bullseye-cxx-arm64 28, trixie-minbase-arm64 63,
# trixie-arm64 76 and trixie-torch-arm64 69 (with qemu's default pointer
# authentication 116, 127 and 183; trixie-arm64 by debootstrap had taken
# 294 beside a one-job build).
#
# Three roots are made by debootstrap --variant=minbase (with --include for
# trixie's python3; trixie-minbase-arm64 bare); the others are made from
# one of them, as the table says: a copy (cp -a --reflink=auto) of that
# cached root, then their own packages installed in it with apt from
# Debian's archive (the suite's main, no -updates or -security, as
# debootstrap; --no-install-recommends, as debootstrap --include follows
# Depends and Pre-Depends only; services not started), so the three
# debootstraps are all the minbase work done. Where a
# dependency has alternatives, apt takes one the root already satisfies and
# debootstrap the first: trixie-torch has no python3-setuptools and none of
# the backports of what Python 3.13 has (exceptiongroup, tomli, zipp,
# importlib-metadata); nothing uses them. trixie-receivers carries trixie's
# python3, unused (its binaries run from the host): a copy of trixie is
# cheaper than another debootstrap. Every root keeps the package lists (as
# debootstrap leaves them) but not the downloaded .debs; a test that installs
# a local .deb gives apt a dead proxy, so a dependency missing from the root
# fails instead of being downloaded.
#
# Cache: ${TORCHMON_RELEASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchmon-release}/roots/
#   <name>-<hash>/root    the root (printed)
#   <name>-<hash>/ready   written last, before the atomic rename
# <hash> is of this script without its comments and its table of roots, of
# the root's own line in it and, for a root made from another, of that
# root's <hash>: changing a recipe makes that root and those made from it
# anew, adding a root to the table does not rebuild the others. The mirror
# is no part of it: debootstrap and apt check every package against the
# archive's signatures, whichever host served it. A root is built in
# <name>-<hash>.tmp.<pid> and renamed into place, under a lock, so a
# half-built root is never used. Never modify a cached root: the tests work
# on throwaway overlays of it, and the roots made from it on copies.
#
# Needs root, debootstrap and Debian's archive: the Debian mirror of this
# machine's apt sources, or TORCHMON_DEBIAN_MIRROR, or for a release Debian
# has moved to its archive of old releases TORCHMON_DEBIAN_ARCHIVE
# (deploy/release/debian-apt.sh says how each is found).
set -euo pipefail
# shellcheck source=deploy/release/debian-apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../deploy/release/debian-apt.sh"

DEBOOTSTRAP=${DEBOOTSTRAP:-/usr/sbin/debootstrap}

# The table of roots. table NAME sets recipe, "SUITE PACKAGES" (debootstrap
# --variant=minbase --include=PACKAGES, or - for none) or "+ROOT PACKAGES"
# (a copy of ROOT with PACKAGES installed by apt: only roots whose packages
# include all of ROOT's), check, a command the finished root must run
# (its /proc mounted): what the tests rely on, and arch, the Debian
# architecture (the build machine's, or arm64 for NAME-arm64: the same
# recipe, made from the arm64 roots).
table() {
  arch=native
  case "$1" in
    # torch 2.6 for aarch64 (Debian builds python3-torch for arm64): the
    # wheel's tests only, no libtorch-dev, g++ or GoogleTest.
    trixie-torch-arm64) recipe="+trixie-arm64 python3-torch,python3-pytest"
                  check="python3 -c 'import torch.monitor, pytest, venv'"
                  arch=arm64 ;;
    # trixie's python3 for aarch64 installed by apt into trixie's minbase,
    # not by debootstrap: so that its standard library is byte-compiled
    # natively after the install (below), not by its postinst under
    # emulation (most of the CPU of a debootstrap with python3).
    trixie-arm64) recipe="+trixie-minbase-arm64 python3,python3-venv"
                  check="python3 -c 'import ensurepip, venv'"
                  arch=arm64 ;;
    *-arm64)      table "${1%-arm64}"
                  arch=arm64
                  [[ $recipe != +* ]] || recipe="${recipe%% *}-arm64 ${recipe#* }" ;;
    bullseye)     recipe="bullseye -"
                  check="getent passwd root" ;;
    bullseye-cxx) recipe="+bullseye g++,cmake,make,pkg-config"
                  check="g++ --version && cmake --version && pkg-config --version" ;;
    trixie-minbase) recipe="trixie -"
                  check="getent passwd root" ;;
    trixie)       recipe="trixie python3,python3-venv"
                  check="python3 -c 'import ensurepip, venv'" ;;
    trixie-torch) recipe="+trixie python3-torch,python3-pytest,libtorch-dev,g++,make,pkg-config,libgtest-dev,libgmock-dev"
                  check="python3 -c 'import torch.monitor, pytest, venv' && g++ --version && pkg-config --version && test -f /usr/include/gmock/gmock.h" ;;
    trixie-receivers) recipe="+trixie prometheus,victoria-metrics"
                  check="prometheus --version && victoria-metrics --version" ;;
    *) echo "usage: $0 bullseye|bullseye-cxx|trixie|trixie-torch|trixie-receivers[-arm64]" >&2; exit 2 ;;
  esac
}  # end of the table of roots

# key NAME: the <hash> of root NAME (the recipe: this script without its
# comments and its table, this root's line of the table, and the <hash> of
# the root it is made from).
key() {
  local recipe check from arch
  table "$1"
  from=${recipe%% *}
  { sed -e '/^# The table of roots/,/^}  # end of the table of roots$/d' -e '/^ *#/d' \
      "${BASH_SOURCE[0]}"
    echo "$recipe"; echo "$check"
    [[ $arch == native ]] || echo "$arch"
    [[ $from != +* ]] || key "${from#+}"; } | sha256sum | cut -c1-12
}

# suite NAME: the Debian release of root NAME.
suite() {
  local recipe check from arch
  table "$1"
  from=${recipe%% *}
  if [[ $from == +* ]]; then suite "${from#+}"; else echo "$from"; fi
}

[[ $# -eq 1 ]] || table ""
name=$1
table "$name"
read -r base packages <<<"$recipe"
[[ $packages != - ]] || packages=""
parent=""
[[ $base != +* ]] || parent=${base#+}
suite=$(suite "$name")

log() { echo "roots.sh[$name]: $*" >&2; }

[[ $(id -u) -eq 0 ]] || { log "must run as root (debootstrap, chroot)"; exit 1; }
[[ -x $DEBOOTSTRAP ]] || { log "debootstrap not found at $DEBOOTSTRAP"; exit 1; }

# An arm64 root's programs run through qemu-aarch64, which binfmt_misc must
# know: registered here (qemu-user-static's own entry, "F": the kernel
# keeps the interpreter open, so a chroot needs no copy of it) if it is not.
if [[ $arch == arm64 && $(uname -m) != aarch64 && ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]]; then
  conf=/usr/lib/binfmt.d/qemu-aarch64.conf
  [[ -f $conf ]] || { log "$conf is missing: deploy/dev/install-deps.sh --release installs qemu-user-static"; exit 1; }
  [[ -e /proc/sys/fs/binfmt_misc/register ]] ||
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc ||
    { log "cannot mount binfmt_misc: aarch64 programs cannot run here"; exit 1; }
  grep -v '^#' "$conf" >/proc/sys/fs/binfmt_misc/register
  log "registered qemu-aarch64 with binfmt_misc ($conf)"
fi

# The CPU it emulates: qemu's "max" with its cheap pointer authentication
# (test_roots.py's QEMU_CPU says why; its chroots read the same file).
# trixie's arm64 packages sign every return address: its three arm64 roots
# took 208 CPU s so, against 426 (bullseye's packages do not, and gain
# nothing).
QEMU_CPU=$(cat "$(dirname "${BASH_SOURCE[0]}")/qemu-cpu")
export QEMU_CPU

cache=${TORCHMON_RELEASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchmon-release}
hash=$(key "$name")
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

# Deletes a build folder: first unmounts what debootstrap or this script
# may have left mounted in it (proc, sys in the target), deepest first, then
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

# The root this one is made from: cached, or made now (its own lock, log
# and timing).
if [[ -n $parent ]]; then
  parent_root=$("${BASH_SOURCE[0]}" "$parent")
  [[ $parent_root == "$cache/roots/$parent-$(key "$parent")/root" ]] ||
    { log "$parent's root is not where its key says: $parent_root"; exit 1; }
fi

debian_mirror "$suite"
mkdir -p "$tmp"
start=$SECONDS
if [[ -z $parent ]]; then
  args=(--variant=minbase)
  [[ $arch == native ]] || args+=("--arch=$arch")
  [[ -n $packages ]] && args+=("--include=$packages")
  log "debootstrap ${args[*]} $suite $tmp/root $debian_main"
  "$DEBOOTSTRAP" "${args[@]}" "$suite" "$tmp/root" "$debian_main" >"$tmp/debootstrap.log" 2>&1 || {
    log "debootstrap failed; last lines of its log:"
    tail -n 30 "$tmp/debootstrap.log" >&2
    exit 1
  }
  # The .debs are not needed.
  rm -f "$tmp/root/var/cache/apt/archives/"*.deb
else
  log "a copy of $parent_root + apt-get install ${packages//,/ } from $debian_main $suite"
  cp -a --reflink=auto "$parent_root" "$tmp/root"
  # As debootstrap would: the suite's main, this machine's resolver
  # configuration, no translations in the package lists; no service
  # started while packages are configured.
  echo "deb $debian_main $suite main" >"$tmp/root/etc/apt/sources.list"
  [[ ! -f /etc/resolv.conf ]] || cp -L /etc/resolv.conf "$tmp/root/etc/resolv.conf"
  printf '#!/bin/sh\nexit 101\n' >"$tmp/root/usr/sbin/policy-rc.d"
  chmod 755 "$tmp/root/usr/sbin/policy-rc.d"
  stdlib=""
  if [[ $arch != native ]]; then
    # apt runs dpkg, and so the maintainer scripts, with DPkg::Path as PATH:
    # /usr/local/bin first, below.
    printf '#!/bin/sh\n# roots.sh: compiled natively after the install\nexit 0\n' \
      >"$tmp/root/usr/local/bin/py3compile"
    chmod 755 "$tmp/root/usr/local/bin/py3compile"
    # Python itself, where this install brings it: its packages' postinst
    # runs /usr/lib/python3.X/py_compile.py over the whole standard library.
    # That file is diverted (dpkg-divert: the package's copy is unpacked
    # under another name) and a stub that compiles nothing stands in its
    # place until the install is done; the library is then compiled natively
    # with the rest. python3.X is the suite's, as its amd64 root has it.
    if [[ ,$packages, == *,python3,* ]]; then
      native=$("${BASH_SOURCE[0]}" "$suite")
      stdlib=/usr/lib/$(readlink "$native/usr/bin/python3")
      [[ $stdlib == /usr/lib/python3.* && ! -e $tmp/root$stdlib/py_compile.py ]] ||
        { log "cannot divert $stdlib/py_compile.py in $name"; exit 1; }
      chroot "$tmp/root" dpkg-divert --quiet --local --rename --divert "$stdlib/py_compile.py.roots-sh" \
        --add "$stdlib/py_compile.py"
      mkdir -p "$tmp/root$stdlib"
      printf '# roots.sh: compiled natively after the install\n' >"$tmp/root$stdlib/py_compile.py"
    fi
    # Each package unpacked by this machine's dpkg-deb, not the root's under
    # emulation, where decompressing took 3.6 times the CPU (python3-torch's
    # dependencies are hundreds of megabytes of xz): dpkg runs the dpkg-deb
    # it finds on PATH, here a wrapper that runs ours through our own loader
    # and libraries, copied into the root for the install. It reads the same
    # .deb formats (ar, tar, xz, zstd, gzip) and writes the same files; dpkg,
    # the root's own, still places them and runs the maintainer scripts.
    mkdir -p "$tmp/root/usr/local/lib/roots-sh-native"
    cp -L /usr/bin/dpkg-deb "$tmp/root/usr/local/lib/roots-sh-native/"
    ldd /usr/bin/dpkg-deb | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\/.*ld-linux/ { print $1 }' |
      while read -r lib; do cp -L "$lib" "$tmp/root/usr/local/lib/roots-sh-native/"; done
    loader=$(cd "$tmp/root/usr/local/lib/roots-sh-native" && ls ld-linux-*.so.*)
    printf '#!/bin/sh\n# roots.sh: this machine'"'"'s dpkg-deb, for the install\nexec /usr/local/lib/roots-sh-native/%s --library-path /usr/local/lib/roots-sh-native /usr/local/lib/roots-sh-native/dpkg-deb "$@"\n' \
      "$loader" >"$tmp/root/usr/local/bin/dpkg-deb"
    chmod 755 "$tmp/root/usr/local/bin/dpkg-deb"
  fi
  mount -t proc proc "$tmp/root/proc"
  apt=(chroot "$tmp/root" env PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive
       apt-get -q -y -o Dpkg::Options::=--force-confold -o Acquire::Languages=none
       -o DPkg::Path=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
  ((!debian_archived)) || apt+=(-o Acquire::Check-Valid-Until=false)
  # shellcheck disable=SC2086  # packages: a comma-separated list
  { "${apt[@]}" update && "${apt[@]}" install --no-install-recommends ${packages//,/ } &&
    "${apt[@]}" clean; } >"$tmp/apt.log" 2>&1 || {
    log "apt-get failed; last lines of its log:"
    tail -n 30 "$tmp/apt.log" >&2
    exit 1
  }
  umount "$tmp/root/proc"
  rm -f "$tmp/root/usr/sbin/policy-rc.d"
  if [[ $arch != native ]]; then
    rm -r "$tmp/root/usr/local/bin/py3compile" "$tmp/root/usr/local/bin/dpkg-deb" \
      "$tmp/root/usr/local/lib/roots-sh-native"
    if [[ -n $stdlib ]]; then
      rm "$tmp/root$stdlib/py_compile.py"
      chroot "$tmp/root" dpkg-divert --quiet --local --rename --divert "$stdlib/py_compile.py.roots-sh" \
        --remove "$stdlib/py_compile.py"
      [[ -f $tmp/root$stdlib/py_compile.py ]] || { log "$stdlib/py_compile.py was not put back"; exit 1; }
    fi
    if [[ -e $tmp/root/usr/bin/python3 ]]; then
      # The amd64 root of this suite (roots.sh makes it if it must), its
      # python3 run through its own loader and libraries, outside any chroot:
      # in one process (-j 1), since a worker process would be started as
      # that python3 alone, on this machine's older glibc.
      native=$("${BASH_SOURCE[0]}" "$suite")
      version=$(readlink "$tmp/root/usr/bin/python3")
      [[ $(readlink "$native/usr/bin/python3") == "$version" ]] ||
        { log "$native's python3 is not $version: cannot compile for $name"; exit 1; }
      loader=$native/lib64/ld-linux-x86-64.so.2
      log "byte-compiling /usr/lib/python3/dist-packages with $native's $version"
      PYTHONHOME=$native/usr PYTHONNOUSERSITE=1 "$loader" --library-path \
        "$native/usr/lib/x86_64-linux-gnu" "$native/usr/bin/$version" -s -m compileall -q -j 1 \
        -s "$tmp/root" -p / "$tmp/root/usr/lib/python3/dist-packages" ${stdlib:+"$tmp/root$stdlib"} \
        >"$tmp/compile.log" 2>&1 || {
        log "compileall failed; last lines of its log:"
        tail -n 30 "$tmp/compile.log" >&2
        exit 1
      }
    fi
  fi
fi

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
  echo "from=${parent:+$parent_root}"
  echo "mirror=$debian_main"
  echo "include=$packages"
  echo "arch=$(chroot "$tmp/root" dpkg --print-architecture)"
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "seconds=$((SECONDS - start))"
} >"$tmp/ready"
mv -T "$tmp" "$entry"
trap - EXIT
log "built in $((SECONDS - start)) s, $(du -sh --one-file-system "$entry/root" | cut -f1): $entry/root"
echo "$entry/root"
