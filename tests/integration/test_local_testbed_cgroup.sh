#!/bin/bash
# The testbed's choice of CPU controller (tula-cluster cgroup FS) on fabricated cgroup file
# systems: the unified hierarchy with a cpu controller gives v2 (quotas in cpu.max); one
# without it, or read-only, gives none with the reason; a v1 cpu hierarchy gives v1
# (cpu.cfs_quota_us); neither gives none naming both. Needs no root and no cluster.
. "$(dirname "$0")/lib.sh"
repo=$(cd "$(dirname "$0")/../.." && pwd)
make_workdir
choose() { "$repo/scripts/tula-cluster" cgroup "$1"; }

v2=$T_WORK/v2
mkdir -p "$v2"
printf 'cpuset cpu io memory pids\n' >"$v2/cgroup.controllers"
: >"$v2/cgroup.subtree_control"
assert_eq "v2 $v2" "$(choose "$v2")" "unified hierarchy with a cpu controller"

nocpu=$T_WORK/v2-nocpu
mkdir -p "$nocpu"
printf 'memory pids\n' >"$nocpu/cgroup.controllers"
: >"$nocpu/cgroup.subtree_control"
assert_match "$(choose "$nocpu")" '^none cgroup v2 at .* has no cpu controller' "unified hierarchy without cpu"

v1=$T_WORK/v1
mkdir -p "$v1/cpu"
echo -1 >"$v1/cpu/cpu.cfs_quota_us"
assert_eq "v1 $v1/cpu" "$(choose "$v1")" "a v1 cpu hierarchy (a hybrid mount's v2 part has no cpu.controllers at the root)"

empty=$T_WORK/none
mkdir -p "$empty"
assert_match "$(choose "$empty")" '^none neither cgroup v2 .* nor a writable cgroup v1 cpu controller' "no controller"

if [ "$(id -u)" != 0 ]; then
    chmod a-w "$v2/cgroup.subtree_control"
    assert_match "$(choose "$v2")" '^none cgroup v2 at .* is not writable' "read-only unified hierarchy"
fi
echo "PASS test_local_testbed_cgroup"
