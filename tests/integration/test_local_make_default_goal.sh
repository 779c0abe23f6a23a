#!/bin/bash
# `make` with no goal builds everything (the Makefile's header and README say so): its default
# goal is `all`, whose first step is the dependency report, not the first object rule the
# Makefile happens to define. Checked with `make -n` (prints the recipes, runs none) on a copy
# of the Makefile's inputs in a scratch build directory, so nothing of the real build changes.
. "$(dirname "$0")/lib.sh"
make_workdir
command -v make >/dev/null || fail "make is not installed"
out=$(make -n -C "$REPO" --no-print-directory B="$T_WORK/build" 2>&1) ||
    fail "make -n with no goal failed" "$(_excerpt "$out" 20)"
first=$(grep -m1 -v '^#' <<<"$out")
assert_match "$first" '^scripts/deps-report ' "the first recipe of \`make\` with no goal (that of \`all\`)"
assert_match "$out" "$T_WORK/build/bin/tula-train" "\`make\` with no goal builds tula-train"
note "ok: make's default goal is all"
