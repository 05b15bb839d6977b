#!/usr/bin/env bash
# Runs fuzz targets for a fixed time each and prints libFuzzer's final stats.
#   fuzz/run.sh SECONDS [TARGET...]      (default: every target)
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz --locked`).
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list)
fi
python3 seed_corpus.py
for t in "${targets[@]}"; do
  echo "== $t for ${seconds}s"
  cargo +nightly fuzz run "$t" -- -max_total_time="$seconds" -rss_limit_mb=2048 2>&1 \
    | tee "/tmp/outpost-fuzz-$t.log" | grep -E '^(Done|#[0-9]+ +DONE)|SUMMARY|panicked|ERROR' || true
done
