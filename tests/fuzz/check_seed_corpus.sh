#!/usr/bin/env bash
# check_seed_corpus.sh <make_seed_corpus> <committed corpus> <scratch dir>
# Fails if a seed make_seed_corpus writes differs from the committed one
# (regenerate with: make_seed_corpus tests/fuzz/corpus). Inputs the fuzzers
# found and were committed by hand are not the generator's and are ignored.
set -euo pipefail
generator=$1 committed=$2 scratch=$3
rm -rf "$scratch"
"$generator" "$scratch"
status=0
while IFS= read -r -d '' file; do
  relative=${file#"$scratch"/}
  if ! cmp -s "$file" "$committed/$relative"; then
    echo "tests/fuzz/corpus/$relative is not what make_seed_corpus writes" >&2
    status=1
  fi
done < <(find "$scratch" -type f -print0)
exit $status
