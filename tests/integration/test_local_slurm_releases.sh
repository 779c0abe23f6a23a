#!/bin/bash
# The Slurm-facing code compiles against the headers of every Slurm release sites run, with no
# warning: the host's libslurm-dev (Debian 12, Slurm 22.05), and those of Debian 13 (24.11) and
# Debian unstable (26.05), fetched by scripts/slurm-headers into build/slurm-headers (kept between
# runs). For each release: cli/slurm_query.cpp (libslurm: partitions, nodes, will-run) and the
# SPANK plugin's sources, with -Wall -Wextra -Werror, Slurm's headers as system headers as the
# Makefile includes them. SKIP when a release's headers cannot be fetched (no mirror).
. "$(dirname "$0")/lib.sh"
repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${TULA_SLURM_HEADERS:-$repo/build/slurm-headers}
make_workdir

n=$(sed -n 's/^#define SLURM_VERSION_NUMBER //p' /usr/include/slurm/slurm_version.h)
releases=("bookworm $(printf '%d.%02d.%d' $((n >> 16 & 255)) $((n >> 8 & 255)) $((n & 255))) /usr/include")
run_cmd "$repo/scripts/slurm-headers" "$cache" trixie sid
[ "$T_RC" = 0 ] || skip "cannot fetch the Slurm headers of Debian 13 and unstable: $(printf '%s\n' "$T_ERR" | tail -n 1)"
while read -r suite version inc; do releases+=("$suite $version $inc"); done <<<"$T_OUT"
assert_eq 3 "${#releases[@]}" "releases checked"

for r in "${releases[@]}"; do
    read -r suite version inc <<<"$r"
    note "Slurm $version ($suite)"
    case "$suite" in bookworm) want=22.05 ;; trixie) want=24.11 ;; sid) want=26.05 ;; esac
    sys=(-isystem "$inc")
    [ "$inc" != /usr/include ] || sys=()  # already the compiler's own system directory
    assert_eq "$want" "${version%.*}" "Slurm release of $suite"
    run_cmd g++ -std=c++17 -fsyntax-only -Wall -Wextra -Wno-unused-parameter -Werror "${sys[@]}" -I"$repo/libtula/include" \
        -I"$repo/cli" "$repo/cli/slurm_query.cpp"
    [ "$T_RC" = 0 ] || fail "cli/slurm_query.cpp does not compile against Slurm $version" "$T_ERR"
    for c in "$repo"/plugin/*.c; do
        run_cmd gcc -std=gnu11 -fsyntax-only -Wall -Wextra -Wno-unused-parameter -Werror "${sys[@]}" -I"$repo/libtula/include" \
            -I"$repo/libtula/src" -I"$repo/plugin" "$c"
        [ "$T_RC" = 0 ] || fail "plugin/$(basename "$c") does not compile against Slurm $version" "$T_ERR"
    done
done
echo "PASS test_local_slurm_releases"
