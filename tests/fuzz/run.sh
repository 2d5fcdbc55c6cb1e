#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time (OKD_FUZZ_SECONDS each, 15 by default), each
# from its saved corpus, and fails on the first crash, leak or timeout: libFuzzer prints the
# input and keeps it in tests/fuzz/artifacts/<target>/, which the corpus replay tests of
# appliance/src/fuzzing.rs then run on every `cargo test`. New inputs the run finds go to a
# scratch directory, not into the committed corpus.
#
# cargo-fuzz is installed (pinned) when missing. RUSTC_BOOTSTRAP=1 lets the stable toolchain
# take the fuzzer's build flags. `-O` with tests/fuzz/Cargo.toml's release profile and 16
# codegen units: a quick build without debug assertions (dhcproto's fire on hostile option
# lengths, which the server catches but libFuzzer aborts on). No sanitizer: the crate denies
# unsafe code, and an AddressSanitizer build takes longer still.
set -euo pipefail
cd "$(dirname "$0")"

CARGO_FUZZ_VERSION=0.13.2
SECONDS_EACH=${OKD_FUZZ_SECONDS:-15}
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  cargo install --locked --quiet "cargo-fuzz@$CARGO_FUZZ_VERSION"
fi
export RUSTC_BOOTSTRAP=1
FLAGS=(-O -s none --codegen-units 16)
cargo fuzz build "${FLAGS[@]}"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# Each target's corpus: its own, or the one it shares (dns_udp sends the responder's inputs
# as datagrams).
corpus_of() {
  case $1 in
    dns_udp) echo dns_request ;;
    *) echo "$1" ;;
  esac
}
for target in $(cargo fuzz list); do
  corpus=corpus/$(corpus_of "$target")
  mkdir -p "$scratch/$target" "artifacts/$target"
  echo "fuzz $target: ${SECONDS_EACH}s from $corpus"
  # -timeout: one input that takes this long is a finding (a served input waits at most 5 s);
  # -rss_limit_mb: the appliance's own bounds, not the machine's memory, stop a growing input.
  if ! cargo fuzz run "${FLAGS[@]}" "$target" "$scratch/$target" "$corpus" -- \
    -max_total_time="$SECONDS_EACH" -timeout=20 -rss_limit_mb=2048 \
    -artifact_prefix="artifacts/$target/" -print_final_stats=1 >"$scratch/$target.log" 2>&1; then
    tail -n 60 "$scratch/$target.log" >&2
    echo "fuzz $target failed: the input is in tests/fuzz/artifacts/$target/" >&2
    exit 1
  fi
  grep -E '^stat::number_of_executed_units' "$scratch/$target.log" || true
done
