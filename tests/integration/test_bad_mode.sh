#!/bin/bash
# A malformed --tula= value (on the command line or in an #SBATCH line) is rejected at
# submission with a message that names the bad value and lists the valid ones; no job is created.
. "$(dirname "$0")/lib.sh"
need_cluster
make_workdir

script=$T_WORK/train.sbatch
write_train_script "$script"
before=$(squeue -h -o %i | sort)

for how in cmdline sbatch-line; do
    if [ $how = cmdline ]; then
        run_cmd sbatch --parsable -o "$T_WORK/%j.out" --tula=bogus "$script"
    else
        write_train_script "$T_WORK/bad.sbatch" "--tula=bogus"
        run_cmd sbatch --parsable -o "$T_WORK/%j.out" "$T_WORK/bad.sbatch"
    fi
    [ "$T_RC" != 0 ] || fail "sbatch with --tula=bogus ($how) succeeded (job $T_OUT); expected a rejection" "stderr:" "$(_excerpt "$T_ERR")"
    ! crashed "$T_RC" || fail "sbatch with --tula=bogus ($how) exited $T_RC (crash?)" "stderr:" "$(_excerpt "$T_ERR")"
    assert_contains "$T_ERR" "tula" "sbatch's error for --tula=bogus ($how) names tula"
    assert_contains "$T_ERR" "bogus" "sbatch's error for --tula=bogus ($how) names the bad value"
    for v in auto time cost off dry-run; do
        assert_match "$T_ERR" "(^|[^a-z-])$v([^a-z-]|\$)" "sbatch's error for --tula=bogus ($how) lists the valid value '$v'"
    done
done

# Other malformed values: a valid value with trailing junk, a stray '='.
for bad in "auto,x" "autox" "=auto"; do
    run_cmd sbatch --parsable -o "$T_WORK/%j.out" "--tula=$bad" "$script"
    [ "$T_RC" != 0 ] && ! crashed "$T_RC" ||
        fail "sbatch --tula='$bad' exited $T_RC; expected a clean rejection" "stdout: $T_OUT" "stderr:" "$(_excerpt "$T_ERR")"
done

new=$(comm -13 <(echo "$before") <(squeue -h -o %i | sort))
assert_eq "" "$new" "jobs created by the rejected submissions"
note "ok: bad --tula values are rejected with the list of valid values"
