#!/bin/bash
# Concurrent end-of-run writes into one user database (security review, finding b): tula-train
# records each run in the user's database at its end, and the tasks of a job array (or the nodes
# of several jobs) finish together; with a short busy timeout (1 s), writers that wait longer
# drop their record, silently (tula-train still exits 0 and only warns).
#
# A job array of 16 tasks (--array=1-16), each running the real tula-train end-of-run write
# (lenet5, 64 training and 64 test images, one epoch: under a second) into the same user
# database ($XDG_DATA_HOME/tula/profiles.db, a copy of the cluster's profiled system database in
# the journal mode tula gave it). The cluster's 4 nodes have 1 CPU each, so the default
# partition is made OverSubscribe=YES:16 for the test (restored at exit) and the array asks for
# --oversubscribe: all 16 tasks run at once. They wait at a barrier (a file per task in a shared
# directory, then a "go" file the test makes) and start tula-train together, so the writes
# overlap. Meanwhile a loop of `sbatch --tula=auto --hold` submissions (cancelled at once)
# reads the same database. Two arrays, one after the other:
#   A. the 16 writers alone;
#   B. the same while another writer (sqlite3, BEGIN IMMEDIATE) holds the write lock from
#      before "go" until 2 s (twice the old busy timeout) after the last task printed
#      tula-train's "done:" line, i.e. while all 16 are at their end-of-run write: every write
#      waits at least 2 s, as the later ones of 16 do when each commit is slow (a network file
#      system). The holder writes nothing (ROLLBACK); it only delays.
# Checks, for each array:
#   - the run count of the database grew by exactly 16 (count before and after) and the 16
#     newest rows' job_id are the tasks' SLURM_JOB_IDs;
#   - PRAGMA integrity_check says ok;
#   - every task exited 0 (scontrol: COMPLETED, ExitCode 0:0) without a "not recorded" warning;
#   - the tula-train runs really overlapped (the last one started before the first ended);
#   - at least one reader submission ran during the writes; every reader's sbatch exited 0.
. "$(dirname "$0")/lib.sh"
need_cluster
need_bin "$TULA" "$TULA_TRAIN"
need_sqlite3
make_workdir
ensure_profile

N=16

export XDG_DATA_HOME=$T_WORK/xdg
udb=$XDG_DATA_HOME/tula/profiles.db
mkdir -p "$XDG_DATA_HOME/tula"
sqlite3 "$TULA_CLUSTER_DIR/system.db" ".backup '$udb'" || fail "cannot copy the system database to $udb"
note "user database $udb, journal mode $(sqlite3 "$udb" "PRAGMA journal_mode")"

# All 16 tasks at once: the default partition shares its CPUs with jobs that ask for it.
part=$(scontrol show partition -o | grep -m1 'Default=YES' | sed -n 's/^PartitionName=\([^ ]*\).*/\1/p')
[ -n "$part" ] || fail "cannot find the default partition" "$(scontrol show partition -o)"
oversub=$(scontrol show partition "$part" -o | tr ' ' '\n' | sed -n 's/^OverSubscribe=//p')
[ -n "$oversub" ] || fail "cannot read OverSubscribe of partition $part"
scontrol update PartitionName="$part" OverSubscribe=YES:$N || fail "cannot set OverSubscribe=YES:$N on partition $part"
on_exit "scontrol update PartitionName='$part' OverSubscribe='$oversub'"

array=$T_WORK/array.sbatch
cat > "$array" <<EOF
#!/bin/bash
#SBATCH --array=1-$N
#SBATCH --oversubscribe
#SBATCH --ntasks=1
# barrier: this task's file in \$BARRIER, then wait for the test's "go" (at most 90 s)
touch "\$BARRIER/\$SLURM_ARRAY_TASK_ID"
for _ in \$(seq 900); do [ -e "\$BARRIER/go" ] && break; sleep 0.1; done
[ -e "\$BARRIER/go" ] || { echo "barrier: no go after 90 s"; exit 3; }
echo "job_id \$SLURM_JOB_ID"
echo "train_start \$(date +%s.%N)"
'$TULA_TRAIN' --model lenet5 --data fashion-mnist --epochs 1 --limit-train 64 --limit-test 64 --threads 1 --prefetch off
rc=\$?
echo "train_end \$(date +%s.%N)"
echo "tula-train exit \$rc"
exit \$rc
EOF

# The readers: sbatch --tula=auto --hold of a training script, cancelled at once, in a loop
# (a quarter of a second apart) until the file $T_WORK/stop-readers appears. Each line of readers.log: start end rc.
reader_script=$T_WORK/train.sbatch
write_train_script "$reader_script"
(
    while [ ! -e "$T_WORK/stop-readers" ]; do
        s=$(date +%s.%N)
        id=$(sbatch --parsable --hold --tula=auto -o /dev/null "$reader_script" 2>>"$T_WORK/readers.err")
        rc=$?
        e=$(date +%s.%N)
        [ -n "$id" ] && scancel "${id%%;*}" 2>/dev/null
        echo "$s $e $rc" >> "$T_WORK/readers.log"
        # a pause, so that the readers leave slurmctld time to start the arrays' tasks
        sleep 0.25
    done
) &
readers=$!
on_exit "touch '$T_WORK/stop-readers'; wait $readers 2>/dev/null"

# The lock holder of array B: sqlite3 reading its commands from a FIFO (fd 7).
holder_start() {
    mkfifo "$T_WORK/holder.in" || fail "cannot create $T_WORK/holder.in"
    sqlite3 "$udb" < "$T_WORK/holder.in" > "$T_WORK/holder.out" 2>&1 &
    holder=$!
    exec 7>"$T_WORK/holder.in"
    on_exit "exec 7>&-; kill $holder 2>/dev/null; wait $holder 2>/dev/null"
    printf '%s\n' "BEGIN IMMEDIATE;" "SELECT 'locked';" >&7
    for _ in $(seq 100); do grep -q '^locked$' "$T_WORK/holder.out" 2>/dev/null && break; sleep 0.05; done
    grep -q '^locked$' "$T_WORK/holder.out" || fail "the lock holder could not lock $udb" "$(_excerpt "$(cat "$T_WORK/holder.out")")"
}
holder_release() {
    printf '%s\n' "ROLLBACK;" ".quit" >&7
    exec 7>&-
    wait "$holder" || fail "the lock holder failed" "$(_excerpt "$(cat "$T_WORK/holder.out")")"
}

# query SQL: the test's own reads of the user database. They wait up to 10 s for a lock (the
# readers' submissions run all the while), so a momentary lock fails no count: what is tested is
# tula's behaviour, below, not the test's inspection.
query() { sqlite3 -cmd ".timeout 10000" "$udb" "$1"; }

# field LINE KEY: KEY=value of one `scontrol -o` line.
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p" | head -n 1; }

# run_array NAME HOLD: one array of N writers (HOLD=1: behind the lock holder); all its checks.
# Sets W_FROM, W_TO (first tula-train start, last end).
run_array() {
    local name=$1 hold=$2 barrier=$T_WORK/barrier-$1 before after job a out text st ec line info recorded
    local first_start last_start first_end last_end done_n
    local ids=() starts=() ends=() bad=()
    mkdir "$barrier" || fail "cannot create $barrier"
    before=$(query "SELECT count(*) FROM run") || fail "$name: cannot count the runs in $udb"
    assert_int "$name: runs in $udb before" "$before"
    submit --export=ALL,BARRIER="$barrier" -o "$T_WORK/$name-%a.out" "$array"
    job=$T_JOB
    on_exit "scancel $job 2>/dev/null"
    for _ in $(seq 600); do [ "$(ls "$barrier" | wc -l)" -ge $N ] && break; sleep 0.1; done
    [ "$(ls "$barrier" | wc -l)" -ge $N ] ||
        fail "$name: only $(ls "$barrier" | wc -l) of $N tasks of job $job reached the barrier in 60 s" "$(squeue -j "$job" 2>&1 | head -n 20)"
    if [ "$hold" = 1 ]; then
        holder_start
        touch "$barrier/go"
        # all N at their end-of-run write: each printed tula-train's done: line (at most 60 s)
        for _ in $(seq 600); do
            done_n=$(cat "$T_WORK/$name"-*.out 2>/dev/null | grep -c '^tula-train: done:')
            [ "$done_n" -ge $N ] && break
            sleep 0.1
        done
        note "$name: $done_n of $N tasks at their end-of-run write; the lock is held 2 s more"
        sleep 2
        holder_release
    else
        touch "$barrier/go"
    fi
    for _ in $(seq 300); do [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && break; sleep 0.5; done
    [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] || fail "$name: array job $job not finished after 150 s" "$(squeue -j "$job" 2>&1 | head -n 20)"

    info=$(scontrol show job "$job" -o 2>/dev/null)
    for a in $(seq $N); do
        out=$T_WORK/$name-$a.out
        text=$(cat "$out" 2>/dev/null)
        line=$(grep -E "ArrayTaskId=$a( |\$)" <<<"$info")
        st=$(field "$line" JobState) ec=$(field "$line" ExitCode)
        if [ "$st" != COMPLETED ] || [ "$ec" != 0:0 ] || ! grep -q '^tula-train exit 0$' <<<"$text"; then
            bad+=("task $a: state ${st:-?}, exit code ${ec:-?}, $(grep '^tula-train exit\|^barrier' <<<"$text")")
        fi
        if grep -q 'not recorded' <<<"$text"; then bad+=("task $a: $(grep -m1 'not recorded' <<<"$text")"); fi
        ids+=("$(sed -n 's/^job_id //p' <<<"$text")")
        starts+=("$(sed -n 's/^train_start //p' <<<"$text")")
        ends+=("$(sed -n 's/^train_end //p' <<<"$text")")
    done

    after=$(query "SELECT count(*) FROM run") || fail "$name: cannot count the runs in $udb after the array"
    note "$name: runs $before -> $after"
    [ "$after" = "$((before + N))" ] ||
        fail "$name: runs in $udb after $N concurrent end-of-run writes ($before before)" \
            "expected: $((before + N))" "seen:     $after" "${#bad[@]} task problem(s), the first 3:" "${bad[@]:0:3}"
    recorded=$(query "SELECT job_id FROM run ORDER BY id DESC LIMIT $N" | sort)
    assert_eq "$(printf '%s\n' "${ids[@]}" | sort)" "$recorded" "$name: job ids of the $N newest runs vs the tasks' SLURM_JOB_ID"
    assert_eq ok "$(query "PRAGMA integrity_check")" "$name: PRAGMA integrity_check of $udb"
    [ ${#bad[@]} = 0 ] || fail "$name: ${#bad[@]} task problem(s) (expected every task COMPLETED, ExitCode 0:0, its run recorded); the first 5:" "${bad[@]:0:5}"

    # The writers overlapped: the last tula-train started before the first one ended.
    first_start=$(printf '%s\n' "${starts[@]}" | sort -g | head -n 1)
    last_start=$(printf '%s\n' "${starts[@]}" | sort -g | tail -n 1)
    first_end=$(printf '%s\n' "${ends[@]}" | sort -g | head -n 1)
    last_end=$(printf '%s\n' "${ends[@]}" | sort -g | tail -n 1)
    note "$name: tula-train runs: first start $first_start, last start $last_start, first end $first_end, last end $last_end"
    awk -v s="$last_start" -v e="$first_end" 'BEGIN { exit !(s < e) }' ||
        fail "$name: the $N tula-train runs did not overlap (the test did not test concurrent writes)" \
            "expected: last start < first end" "seen: last start $last_start, first end $first_end"
    W_FROM=$first_start W_TO=$last_end
}

run_array A 0
a_from=$W_FROM a_to=$W_TO
run_array B 1
b_from=$W_FROM b_to=$W_TO
touch "$T_WORK/stop-readers"
wait "$readers"

# The readers ran during the writes and every submission went through.
[ -s "$T_WORK/readers.log" ] || fail "no reader submission ran"
nreaders=$(wc -l < "$T_WORK/readers.log")
assert_eq "" "$(awk '$3 != 0' "$T_WORK/readers.log")" "reader submissions (start end rc) that did not exit 0"
for w in "A $a_from $a_to" "B $b_from $b_to"; do
    set -- $w
    during=$(awk -v a="$2" -v b="$3" '$1 < b && $2 > a' "$T_WORK/readers.log" | wc -l)
    [ "$during" -ge 1 ] || fail "no reader submission overlapped the writes of array $1" "readers (start end rc):" "$(_excerpt "$(cat "$T_WORK/readers.log")")"
    note "array $1: $during reader submission(s) during its writes"
done
note "readers: $nreaders submissions; their tula: lines:" "$(sort "$T_WORK/readers.err" | uniq -c | head -n 5)"
note "ok: 2 x $N concurrent end-of-run writes (the second behind a 2 s lock): exact run counts, integrity ok, every task exited 0"
