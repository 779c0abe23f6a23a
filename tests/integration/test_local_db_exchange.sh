#!/usr/bin/env bash
# tula db export / import / prune between two databases: rows survive a round trip (checked with
# sqlite3 directly when it is installed, else with tula db list), a re-import adds nothing, bad
# files are refused with the row number, prune counts what it removed.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA"
make_workdir
unset TULA_CONF
export XDG_DATA_HOME=$T_WORK/xdg
now=$(date +%s)
cat >seed.json <<JSON
{"format": "tula-profiles", "schema_version": 1,
 "workloads": [{"name": "lenet5@fashion-mnist", "model": "lenet5", "dataset": "fashion-mnist",
                "params": 61706, "train_examples": 60000, "test_examples": 10000}],
 "compute": [
  {"workload": "lenet5@fashion-mnist", "host": "n1", "local_batch": 16, "threads": 1, "seconds_per_iter": 0.0038, "iters": 5, "created": $now},
  {"workload": "lenet5@fashion-mnist", "host": "n1", "local_batch": 32, "threads": 1, "seconds_per_iter": 0.0070, "iters": 5, "created": 1000000},
  {"workload": "fmnist-cnn@fashion-mnist", "host": "n1", "local_batch": 32, "threads": 1, "seconds_per_iter": 0.09, "iters": 5, "created": $now}],
 "allreduce": [{"host": "n1", "nodes": 2, "bytes": 4096, "seconds": 0.0001, "created": 1000000}],
 "runs": [{"job_id": "42", "workload": "lenet5@fashion-mnist", "nodes": 2, "global_batch": 64, "epochs": 2,
           "predicted_seconds": 10.5, "measured_seconds": 11.25, "test_accuracy": 0.81, "created": $now,
           "epoch_rows": [{"epoch": 1, "seconds": 5.5, "train_loss": 0.7, "test_accuracy": 0.78},
                          {"epoch": 2, "seconds": 5.75, "train_loss": null, "test_accuracy": null}]}]}
JSON
expect_ok "import" "$TULA" db import --db a.db seed.json
assert_contains "$T_OUT" "1 workload, 3 compute samples, 1 allreduce sample, 1 run (0 already present" "import counts"
expect_ok "re-import" "$TULA" db import --db a.db seed.json
assert_contains "$T_OUT" "0 compute samples, 0 allreduce samples, 0 runs (5 already present" "re-import skips"
expect_ok "export" "$TULA" db export --db a.db -o a.json
expect_ok "import the export" "$TULA" db import --db b.db a.json
expect_ok "export again" "$TULA" db export --db b.db
# The two exports differ only in their "exported" time.
diff <(grep -v '"exported"' a.json) <(grep -v '"exported"' <<<"$T_OUT") >/dev/null ||
    fail "export of the imported database differs from the original export"
if command -v sqlite3 >/dev/null; then
    q="SELECT workload, host, local_batch, threads, seconds_per_iter, iters, created FROM compute_profile ORDER BY id;
       SELECT e.epoch, e.seconds, e.train_loss FROM run_epoch e ORDER BY e.run_id, e.epoch;"
    assert_eq "$(sqlite3 a.db "$q")" "$(sqlite3 b.db "$q")" "rows after export -> import (sqlite3)"
fi
expect_ok "export one workload" "$TULA" db export --db a.db --workload fmnist-cnn@fashion-mnist
assert_not_contains "$T_OUT" "lenet5" "export --workload leaves other workloads out"

# Bad files: one tula: line naming the row, nothing added.
bad() {  # WHAT SED_EXPR EXPECTED_TEXT
    sed "$2" seed.json >bad.json
    expect_fail "$1" "$TULA" db import --db c.db bad.json
    assert_eq 1 "$T_RC" "$1: exit status"
    assert_eq 1 "$(count_lines "$T_ERR" .)" "$1: one line"
    assert_contains "$T_ERR" "$3" "$1: message"
}
bad "negative time" 's/"seconds_per_iter": 0.0070/"seconds_per_iter": -0.007/' "tula: bad.json: compute row 2: seconds_per_iter must be > 0"
bad "zero batch" 's/"local_batch": 16/"local_batch": 0/' "compute row 1: local_batch"
bad "string count" 's/"nodes": 2, "bytes"/"nodes": "2", "bytes"/' "allreduce row 1: nodes must be an integer"
bad "NaN" 's/"seconds": 0.0001/"seconds": NaN/' "not valid JSON"
bad "schema" 's/"schema_version": 1/"schema_version": 999/' "upgrade tula"
bad "truncated" '$d' "not valid JSON"
expect_ok "list" "$TULA" db list --db c.db --format json
assert_contains "$T_OUT" '"workloads": []' "nothing added by rejected files"
expect_fail "missing file" "$TULA" db import --db c.db nope.json
assert_match "$T_ERR" "^tula: cannot read nope.json" "missing file message"

# Prune.
expect_fail "prune without a filter" "$TULA" db prune --db a.db
assert_eq 2 "$T_RC" "prune without a filter: usage error"
expect_ok "prune old" "$TULA" db prune --db a.db --older-than 30
assert_contains "$T_OUT" "2 rows (1 compute sample, 1 allreduce sample, 0 runs, 0 workloads)" "prune --older-than counts"
expect_ok "prune workload" "$TULA" db prune --db a.db --workload lenet5@fashion-mnist
assert_contains "$T_OUT" "3 rows (1 compute sample, 0 allreduce samples, 1 run, 1 workload)" "prune --workload counts"
expect_ok "list after prune" "$TULA" db list --db a.db --format json
assert_not_contains "$T_OUT" "lenet5" "lenet5 gone"
assert_contains "$T_OUT" "fmnist-cnn@fashion-mnist" "fmnist-cnn kept"
expect_fail "prune missing db" "$TULA" db prune --db none.db --older-than 1
assert_match "$T_ERR" "^tula: profile database .*none.db does not exist" "prune missing db message"
note "ok"
