#!/bin/bash
# tula-train rejects bad input with a clear message and a non-zero exit, without hanging (each
# run under `timeout`): an unknown model, a missing or empty data directory, a truncated gzip
# file, a gzip file whose IDX payload is shorter than its header says, --precision bf16 without
# --device cuda or an unknown --precision, and a global batch not divisible by the MPI rank
# count. A positive control (the same small run with good input) must succeed, so that the
# failures are the input's doing. No cluster needed.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA_TRAIN"
make_workdir
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    [ -r "$T_DATA_DIR/$f" ] || fail "missing $T_DATA_DIR/$f (apt-get install dataset-fashion-mnist)"
done
small=(--epochs 1 --limit-train 256 --limit-test 64 --no-db)

# expect_reject WHAT NEEDLE CMD...: CMD exits non-zero (not by a signal or the timeout) and its
# stderr names NEEDLE (case-insensitive) on a line starting with tula-train: or tula:.
expect_reject() {
    local what=$1 needle=$2; shift 2
    run_cmd timeout -k 5 120 "$@"
    [ "$T_RC" != 124 ] && [ "$T_RC" != 137 ] || fail "$what: hung (killed by timeout after 120 s)"
    [ "$T_RC" != 0 ] || fail "$what: exited 0, expected an error" "stdout:" "$(_excerpt "$T_OUT")"
    ! crashed "$T_RC" || fail "$what: exited $T_RC (crash or signal), expected a clean error" "stderr:" "$(_excerpt "$T_ERR")"
    grep -iE '^(tula-train|tula): ' <<<"$T_ERR" | grep -qiF -- "$needle" ||
        fail "$what: no 'tula-train: ...' message naming '$needle' on stderr" "stderr:" "$(_excerpt "$T_ERR")"
    [ "$(count_lines "$T_ERR" 'terminate called|Segmentation|Aborted|core dumped')" = 0 ] ||
        fail "$what: crashed" "$(_excerpt "$T_ERR")"
}

# Positive control with a copy of the data directory.
mkdir -p good
cp "$T_DATA_DIR"/*.gz good/
expect_ok "positive control (good data copy)" timeout 120 "$TULA_TRAIN" --model lenet5 --data fashion-mnist --data-dir good "${small[@]}"
assert_match "$T_OUT" '^tula-train: done:' "positive control output"

expect_reject "unknown model" "nosuchnet" "$TULA_TRAIN" --model nosuchnet --data fashion-mnist --data-dir good "${small[@]}"
assert_contains "$T_ERR" "lenet5" "the unknown-model message lists the valid models"

expect_reject "missing data directory" "$T_WORK/nowhere" \
    "$TULA_TRAIN" --model lenet5 --data fashion-mnist --data-dir "$T_WORK/nowhere" "${small[@]}"

mkdir -p empty
expect_reject "empty data directory" "empty" "$TULA_TRAIN" --model lenet5 --data fashion-mnist --data-dir "$T_WORK/empty" "${small[@]}"

# --precision: bf16 is for the CUDA backend only; unknown values are named.
expect_reject "--precision bf16 on the CPU" "--precision bf16 needs --device cuda" \
    "$TULA_TRAIN" --model lenet5 --data fashion-mnist --data-dir good --precision bf16 "${small[@]}"
expect_reject "--precision fp16" "unknown --precision 'fp16'" \
    "$TULA_TRAIN" --model lenet5 --data fashion-mnist --data-dir good --precision fp16 "${small[@]}"

# A gzip file cut in the middle of the compressed stream.
mkdir -p cut && cp good/*.gz cut/
size=$(stat -c %s cut/train-images-idx3-ubyte.gz)
head -c $((size / 2)) good/train-images-idx3-ubyte.gz > cut/train-images-idx3-ubyte.gz
expect_reject "truncated gzip file" "train-images-idx3-ubyte.gz" \
    "$TULA_TRAIN" --model lenet5 --data fashion-mnist --data-dir "$T_WORK/cut" --epochs 1 --limit-test 64 --no-db

# A complete gzip stream holding fewer images than the IDX header says.
mkdir -p short && cp good/*.gz short/
zcat good/t10k-images-idx3-ubyte.gz | head -c $((16 + 28 * 28 * 100)) | gzip > short/t10k-images-idx3-ubyte.gz
expect_reject "IDX payload shorter than its header" "t10k-images-idx3-ubyte.gz" \
    "$TULA_TRAIN" --model lenet5 --data fashion-mnist --data-dir "$T_WORK/short" --epochs 1 --limit-train 256 --no-db

# Global batch not divisible by the rank count, as an option and from TULA_BATCH_SIZE.
if command -v mpirun >/dev/null; then
    mpi=(mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to none)
    expect_ok "positive control with 2 ranks" timeout 120 "${mpi[@]}" "$TULA_TRAIN" --model lenet5 --data fashion-mnist \
        --data-dir good --batch-size 64 "${small[@]}"
    assert_match "$T_OUT" '^tula-train: done:.* ranks=2( |$)' "2-rank positive control output (2 ranks on this one host: nodes=1 ranks=2)"
    expect_reject "--batch-size 65 on 2 ranks" "65" "${mpi[@]}" "$TULA_TRAIN" --model lenet5 --data fashion-mnist \
        --data-dir good --batch-size 65 "${small[@]}"
    expect_reject "TULA_BATCH_SIZE=65 on 2 ranks" "65" env TULA_BATCH_SIZE=65 "${mpi[@]}" -x TULA_BATCH_SIZE \
        "$TULA_TRAIN" --model lenet5 --data fashion-mnist --data-dir good "${small[@]}"
else
    fail "mpirun not found (apt-get install openmpi-bin)"
fi
note "ok: bad trainer input is rejected cleanly"
