#!/usr/bin/env bash
# check_tsan_interposition.sh <executable> <binary>...
# TSan sees absl::Mutex only through tsan_absl_mutex.cc, which annotates the
# entry points that our code and gRPC call. This fails if a binary of the
# TSan build, or a library it loads, calls an entry point that takes or
# releases a Mutex and is not annotated there (say, someone starts using
# Mutex::LockWhen): TSan would then report false races, or miss real ones.
# It also fails if <executable> does not define (export) every entry point
# listed here as annotated, so that the list cannot claim more than the
# wrappers do.
set -euo pipefail
# Annotated in tsan_absl_mutex.cc.
annotated=('Mutex::Lock()' 'Mutex::Unlock()' 'Mutex::TryLock()' 'Mutex::ReaderLock()'
           'Mutex::ReaderUnlock()' 'Mutex::ReaderTryLock()' 'Mutex::~Mutex()'
           'Mutex::Await(' 'Mutex::AwaitWithTimeout(' 'Mutex::AwaitWithDeadline('
           'CondVar::Wait(' 'CondVar::WaitWithTimeout(' 'CondVar::WaitWithDeadline(')
# Neither acquire nor release anything TSan needs to know about.
harmless='CondVar::(Signal|SignalAll|~CondVar|CondVar)\(\)|Mutex::(Assert(Reader)?Held|AssertNotHeld|EnableDebugLog|EnableInvariantDebugging|ForgetDeadlockInfo)\('
status=0

defined=$(nm -DC --defined-only "$1")
for entry in "${annotated[@]}"; do
  if ! grep -Fq "::$entry" <<<"$defined"; then
    echo "$1 does not define absl::$entry, listed here as annotated" >&2
    status=1
  fi
done

is_annotated() {
  local entry
  for entry in "${annotated[@]}"; do
    [[ "$1" == *"::$entry"* ]] && return 0
  done
  return 1
}

declare -A seen
for binary in "$@"; do
  files=("$binary")
  while read -r lib; do files+=("$lib"); done < <(ldd "$binary" | awk '/=> \//{print $3}')
  for file in "${files[@]}"; do
    [[ -n "${seen[$file]:-}" ]] && continue
    seen[$file]=1
    while read -r symbol; do
      if ! is_annotated "$symbol" && ! grep -Eq "$harmless" <<<"$symbol"; then
        echo "$file calls $symbol, which tsan_absl_mutex.cc does not annotate" >&2
        status=1
      fi
    done < <(nm -DC --undefined-only "$file" 2>/dev/null |
             grep -Eo 'absl::[A-Za-z0-9_]+::(Mutex|CondVar)::[^ ].*' || true)
  done
done
[[ $status -eq 0 ]] && echo "every absl::Mutex / CondVar entry point called is annotated"
exit $status
