#!/usr/bin/env bash
# check_tsan_interposition.sh <binary>...
# TSan sees absl::Mutex only through tsan_absl_mutex.cc, which annotates the
# entry points that our code and gRPC call. This fails if a binary of the
# TSan build, or a library it loads, calls an entry point that takes or
# releases a Mutex and is not annotated there (say, someone starts using
# Mutex::LockWhen): TSan would then report false races, or miss real ones.
set -euo pipefail
# Annotated in tsan_absl_mutex.cc.
annotated='Mutex::(Lock|Unlock|TryLock|ReaderLock|ReaderUnlock|ReaderTryLock|~Mutex)\(\)|CondVar::(Wait|WaitWithTimeout|WaitWithDeadline)\('
# Neither acquire nor release anything TSan needs to know about.
harmless='CondVar::(Signal|SignalAll|~CondVar|CondVar)\(\)|Mutex::(Assert(Reader)?Held|AssertNotHeld|EnableDebugLog|EnableInvariantDebugging|ForgetDeadlockInfo)\('
status=0
declare -A seen
for binary in "$@"; do
  files=("$binary")
  while read -r lib; do files+=("$lib"); done < <(ldd "$binary" | awk '/=> \//{print $3}')
  for file in "${files[@]}"; do
    [[ -n "${seen[$file]:-}" ]] && continue
    seen[$file]=1
    while read -r symbol; do
      if ! grep -Eq "$annotated|$harmless" <<<"$symbol"; then
        echo "$file calls $symbol, which tsan_absl_mutex.cc does not annotate" >&2
        status=1
      fi
    done < <(nm -DC --undefined-only "$file" 2>/dev/null |
             grep -Eo 'absl::[A-Za-z0-9_]+::(Mutex|CondVar)::[^ ].*' || true)
  done
done
[[ $status -eq 0 ]] && echo "every absl::Mutex / CondVar entry point called is annotated"
exit $status
