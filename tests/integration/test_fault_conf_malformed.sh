#!/bin/bash
# Fault: tula.conf is malformed (an unknown key and a value that is not a number), then missing.
# Each time sbatch --tula=auto submits the job with one tula: line (a warning naming tula.conf
# when malformed), no hang, no node drained (fault.sh). The file is restored at exit.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fault.sh"
fault_begin
conf=$TULA_CLUSTER_DIR/etc/tula.conf
[ -f "$conf" ] || fail "no $conf in the cluster"
cp "$conf" "$T_WORK/tula.conf.orig"
fault_replace "$conf"
{ cat "$T_WORK/tula.conf.orig"; echo "bogus_key = 1"; echo "time_margin = lots"; } > "$conf"
fault_submit "malformed tula.conf"
fault_warned "malformed tula.conf" "tula.conf"
rm -f "$conf"
fault_submit "missing tula.conf"
note "ok: malformed and missing tula.conf -> jobs submitted with one tula: line"
