#!/bin/bash
# tula profile allreduce is resumable: a node count whose samples the database already has at
# every asked size is skipped (and named, and no job is submitted for it) unless --force; a new
# size makes it measure again. Sample counts are read with sqlite3, not from tula's own summary.
# Runs on the local cluster, into a private database.
. "$(dirname "$0")/lib.sh"
need_cluster
need_bin "$TULA" "$TULA_TRAIN"
make_workdir
need_sqlite3
db=$T_WORK/ar.db
samples() { sqlite3 "$db" "SELECT count(*) FROM allreduce_profile WHERE nodes = 2"; }

expect_ok "first allreduce profile" "$TULA" profile allreduce --nodes 2 --sizes 4096,65536 --db "$db"
assert_eq 2 "$(samples)" "samples on 2 nodes after the first profile"
assert_match "$T_OUT" '^profile allreduce: 1/1 2 nodes \.\.\. ' "one progress line per node count"
assert_not_contains "$T_OUT" $'\r' "no carriage return when stdout is not a terminal"

expect_ok "the same profile again" "$TULA" profile allreduce --nodes 2 --sizes 4096,65536 --db "$db"
assert_match "$T_OUT" '^profile allreduce: skipping node count 2, already measured' "the skipped node count is named"
assert_eq 0 "$(count_lines "$T_OUT" '^profile allreduce: [0-9]+/[0-9]+ ')" "no job for a measured node count"
assert_eq 2 "$(samples)" "samples on 2 nodes unchanged"

expect_ok "a new size" "$TULA" profile allreduce --nodes 2 --sizes 4096,65536,262144 --db "$db"
assert_eq 5 "$(samples)" "a size not measured yet measures the node count again (2 + 3 samples)"

expect_ok "--force" "$TULA" profile allreduce --nodes 2 --sizes 4096 --force --db "$db"
assert_eq 6 "$(samples)" "--force measures again"

# A system database that does not exist yet: written through a staged temporary file, which is
# empty until the first job writes it and must read as no database, not as a broken one.
sysdb=$T_WORK/sys/system.db
printf 'system_db = %s\n' "$sysdb" >"$T_WORK/sys.conf"
expect_ok "into a new system database" "$TULA" profile allreduce --conf "$T_WORK/sys.conf" --nodes 2 --sizes 4096 --db "$sysdb"
assert_eq 1 "$(sqlite3 "$sysdb" "SELECT count(*) FROM allreduce_profile WHERE nodes = 2")" "the new system database has the sample"
note "ok"
