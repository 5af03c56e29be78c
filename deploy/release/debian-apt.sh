# shellcheck shell=bash disable=SC2034  # debian_* are for the script that sources this
# Debian's archive for the portable build and its tests, as this machine's
# apt configuration names it. Sourced (bash) by deploy/release/deps.sh,
# snappy.sh, toolchain.sh, tests/release/torch_headers.sh and
# tests/release/roots.sh; sourcing it only defines the functions below, and
# nothing here touches the system's apt configuration or state.
#
#   debian_mirror SUITE
#       Sets debian_main (the Debian archive that serves SUITE),
#       debian_security (the one that serves SUITE-security) and
#       debian_archived (1 when SUITE comes from TORCHMON_DEBIAN_ARCHIVE,
#       else 0). roots.sh hands debian_main to debootstrap.
#   debian_apt_state DIR TYPE SUITE...
#       Calls debian_mirror for the release of the SUITEs (one release's:
#       NAME, NAME-updates, NAME-security), writes a private apt state in DIR
#       (DIR/sources.list with a TYPE line, "deb" or "deb-src", component
#       main, for each SUITE; DIR/lists/, DIR/archives/) and sets the array
#       debian_apt_opts, the options that make apt-get use that state and
#       nothing of the system's sources, lists or dpkg status:
#         apt-get "${debian_apt_opts[@]}" update
# Both return 1 with a message on stderr when there is no mirror to use.
#
# Where the mirror comes from:
#   TORCHMON_DEBIAN_MIRROR   Debian's archive, e.g. http://mirror.example/debian;
#                            its security archive is the same URL with
#                            "-security" appended (…/debian-security), as
#                            Debian lays out its own hosts and its mirrors.
#   otherwise                the mirror in this machine's apt sources (the
#                            files apt-config names: one-line .list files and
#                            deb822 .sources files, in apt's order): the first
#                            enabled deb or deb-src entry with component main
#                            for this Debian release's suite (VERSION_CODENAME
#                            of /etc/os-release), and the first for its
#                            -security suite (if there is none: the derived
#                            URL above). An entry whose Signed-By names a
#                            keyring other than Debian's archive keyring is
#                            another repository's, and is skipped; so are
#                            files apt does not read (other name endings).
#
# A release whose long-term support has ended is moved off Debian's mirrors
# to Debian's archive of old releases: the mirror no longer has
# dists/SUITE/Release (asked with curl, which honours http_proxy; when the
# mirror cannot be asked at all, it is taken to serve SUITE and apt says what
# is wrong). Then:
#   TORCHMON_DEBIAN_ARCHIVE  that archive's URL (its security archive, again,
#                            with "-security" appended). It serves SUITE and
#                            SUITE-security but no SUITE-updates (left out:
#                            the release's last point release has them), and
#                            its Release files are past their Valid-Until
#                            (apt is told not to check that date; the
#                            signatures are checked as always).
#   Without it, debian_mirror fails and names the suite, the mirror that
#   lacks it and this variable.
#
# The mirror does not change what is fetched: the archive's signatures check
# every file, whichever host served it. So no cache key depends on it.

# _debian_host_sources: "URI SUITE" for every suite of every enabled deb or
# deb-src entry with component main in this machine's apt sources, in apt's
# order, but for entries signed by a keyring other than Debian's.
_debian_host_sources() {
  local list parts files=() f
  eval "$(apt-config shell list Dir::Etc::sourcelist/f parts Dir::Etc::sourceparts/d)"
  [[ -z ${list:-} || ! -f $list ]] || files+=("$list")
  for f in "${parts:-/nonexistent}"/*; do
    case $f in *.list | *.sources) [[ ! -f $f ]] || files+=("$f") ;; esac
  done
  ((${#files[@]})) || return 0
  awk '
    function emit(types, uris, suites, comps, enabled, signedby,   n, ns, i, j, t, u, s, ok) {
      if (tolower(enabled) ~ /^ *no *$/) return
      if (signedby != "" && signedby !~ /debian-archive/) return
      if ((" " comps " ") !~ /[ \t]main[ \t]/) return
      ok = 0
      n = split(types, t, " ")
      for (i = 1; i <= n; i++) if (t[i] == "deb" || t[i] == "deb-src") ok = 1
      if (!ok) return
      n = split(uris, u, " ")
      ns = split(suites, s, " ")
      for (i = 1; i <= n; i++) for (j = 1; j <= ns; j++) print u[i], s[j]
    }
    function flush() {  # the deb822 paragraph read so far
      if (key != "") emit(f["types"], f["uris"], f["suites"], f["components"], f["enabled"], f["signed-by"])
      split("", f)
      key = ""
    }
    FNR == 1 { flush() }
    FILENAME ~ /\.sources$/ {
      if ($0 ~ /^#/) next
      if ($0 ~ /^[ \t]*$/) { flush(); next }
      if ($0 ~ /^[ \t]/) { if (key != "") f[key] = f[key] " " $0; next }  # a continuation line
      key = tolower(substr($0, 1, index($0, ":") - 1))
      f[key] = substr($0, index($0, ":") + 1)
      next
    }
    {  # one-line format: deb [options] URI SUITE COMPONENT...
      sub(/#.*/, "")
      if ($1 != "deb" && $1 != "deb-src") next
      i = 2; opts = ""; signedby = ""
      if ($2 ~ /^\[/) {
        for (; i <= NF; i++) { opts = opts " " $i; if ($i ~ /\]$/) { i++; break } }
        if (match(opts, /signed-by=[^ \]]*/)) signedby = substr(opts, RSTART + 10, RLENGTH - 10)
      }
      comps = ""
      for (j = i + 2; j <= NF; j++) comps = comps " " $j
      emit($1, $i, $(i + 1), comps, "", signedby)
    }
    END { flush() }
  ' "${files[@]}"
}

# _debian_mirrors: sets _debian_main and _debian_security, once.
_debian_mirrors() {
  [[ -z ${_debian_main:-} ]] || return 0
  if [[ -n ${TORCHMON_DEBIAN_MIRROR:-} ]]; then
    _debian_main=${TORCHMON_DEBIAN_MIRROR%/}
    _debian_security=$_debian_main-security
    return 0
  fi
  local id codename sources uri suite
  id=$( (. /etc/os-release && echo "${ID:-}") 2>/dev/null || true)
  codename=$( (. /etc/os-release && echo "${VERSION_CODENAME:-}") 2>/dev/null || true)
  if [[ $id != debian || -z $codename ]]; then
    echo "debian-apt.sh: this machine is not a Debian release (/etc/os-release: ID=$id," \
      "VERSION_CODENAME=$codename), so its apt sources do not say where Debian's archive is:" \
      "set TORCHMON_DEBIAN_MIRROR to a Debian mirror's URL (like http://mirror.example/debian)" >&2
    return 1
  fi
  sources=$(_debian_host_sources) || return 1
  _debian_main='' _debian_security=''
  while read -r uri suite; do
    [[ -n $_debian_main || $suite != "$codename" ]] || _debian_main=${uri%/}
    [[ -n $_debian_security || $suite != "$codename-security" ]] || _debian_security=${uri%/}
  done <<<"$sources"
  if [[ -z $_debian_main ]]; then
    echo "debian-apt.sh: no entry of this machine's apt sources serves Debian's $codename" \
      "(component main): set TORCHMON_DEBIAN_MIRROR to a Debian mirror's URL" \
      "(like http://mirror.example/debian)" >&2
    return 1
  fi
  [[ -n $_debian_security ]] || _debian_security=$_debian_main-security
}

# _debian_serves MIRROR SUITE: 0 if MIRROR has dists/SUITE/Release (or could
# not be asked), 1 if it answers that it has not.
_debian_serves() {
  local rc=0
  curl -sfI --max-time 20 -o /dev/null "$1/dists/$2/Release" || rc=$?
  case $rc in
    0) return 0 ;;
    22 | 37 | 78) return 1 ;;  # an HTTP error status; file:// or ftp:// without the file
    *) echo "debian-apt.sh: could not ask $1 whether it serves $2 (curl exit $rc);" \
         "going on as if it does" >&2
       return 0 ;;
  esac
}

debian_mirror() {
  local suite=$1
  _debian_mirrors || return 1
  debian_main=$_debian_main debian_security=$_debian_security debian_archived=0
  ! _debian_serves "$debian_main" "$suite" || return 0
  if [[ -z ${TORCHMON_DEBIAN_ARCHIVE:-} ]]; then
    echo "debian-apt.sh: Debian's mirror $debian_main does not serve $suite (no dists/$suite/Release)." \
      "A Debian release whose support has ended is moved to Debian's archive of old releases: set" \
      "TORCHMON_DEBIAN_ARCHIVE to that archive's URL (like http://mirror.example/debian; its security" \
      "archive is the same URL with -security appended)" >&2
    return 1
  fi
  debian_main=${TORCHMON_DEBIAN_ARCHIVE%/}
  debian_security=$debian_main-security
  debian_archived=1
  if ! _debian_serves "$debian_main" "$suite"; then
    echo "debian-apt.sh: neither Debian's mirror $_debian_main nor TORCHMON_DEBIAN_ARCHIVE" \
      "($debian_main) serves $suite (no dists/$suite/Release)" >&2
    return 1
  fi
  echo "debian-apt.sh: $suite comes from TORCHMON_DEBIAN_ARCHIVE ($debian_main):" \
    "$_debian_main does not serve it" >&2
}

debian_apt_state() {
  local dir=$1 type=$2 suite
  shift 2
  debian_mirror "${1%%-*}" || return 1
  mkdir -p "$dir"/lists/partial "$dir"/archives/partial || return 1
  for suite; do
    case $suite in
      *-security) echo "$type $debian_security $suite main" ;;
      *-updates) ((debian_archived)) || echo "$type $debian_main $suite main" ;;
      *) echo "$type $debian_main $suite main" ;;
    esac
  done >"$dir/sources.list" || return 1
  debian_apt_opts=(-o "Dir::Etc::SourceList=$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
                   -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir" -o Dir::State::status=/dev/null
                   -o APT::Sandbox::User=root -o Debug::NoLocking=1)
  ((!debian_archived)) || debian_apt_opts+=(-o Acquire::Check-Valid-Until=false)
}
