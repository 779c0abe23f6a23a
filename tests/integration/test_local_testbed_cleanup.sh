#!/bin/bash
# `tula-cluster stop` removes everything the isolated testbed made, after a clean run and after
# a crash (every daemon killed with SIGKILL first): no network namespace tula-ID-*, no cgroup
# under /sys/fs/cgroup/cpu/tula/ID, no process of the cluster, and the machine's own namespace
# never had an address of it. The daemons run in the cluster's log directory (a core file of
# one that crashes stays there, out of the caller's directory), and stop names a core file it
# finds there. SKIP where the testbed cannot be made (not root, another kernel).
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces and cgroups)"
make_workdir
cluster=$REPO/scripts/tula-cluster

leftovers() {  # leftovers ID: what of testbed ID is still there
    local id=$1
    ls -d /run/netns/tula-"$id"-* 2>/dev/null
    [ -d "/sys/fs/cgroup/cpu/tula/$id" ] && echo "/sys/fs/cgroup/cpu/tula/$id"
    ip -4 -o addr show 2>/dev/null | grep -F "10.77.0." || true
}

for how in clean crash; do
    dir=$T_WORK/$how
    run_cmd timeout 120 "$cluster" start "$dir"
    [ "$T_RC" = 0 ] || fail "$how: tula-cluster start failed" "$(_excerpt "$T_ERR")"
    if [ "$(cat "$dir/run/mode")" != isolated ]; then
        "$cluster" stop "$dir" >/dev/null 2>&1
        skip "the testbed cannot be made here: $(grep -h 'unavailable' <<<"$T_ERR$T_OUT" | head -n 1)"
    fi
    id=$(cat "$dir/run/id")
    on_exit "$cluster stop $dir >/dev/null 2>&1"
    [ -n "$(leftovers "$id")" ] || fail "$how: no namespace or cgroup of testbed $id while it runs"
    assert_eq "" "$(ip -4 -o addr show | grep -F 10.77.0.)" "$how: addresses of the testbed in the machine's namespace"
    real=$(cd "$dir" && pwd -P)  # the path tula-cluster works with
    for p in $(cat "$dir/run/pids"); do
        assert_eq "$real/log" "$(readlink "/proc/$p/cwd")" "$how: working directory of daemon $p ($(tr '\0' ' ' < "/proc/$p/cmdline"))"
    done
    if [ "$how" = crash ]; then
        for p in $(cat "$dir/run/pids"); do kill -KILL "$p" 2>/dev/null; done
        sleep 1
        printf 'not a real core file\n' > "$dir/log/core"  # what a crashing daemon leaves there
    fi
    pids=$(cat "$dir/run/pids")
    run_cmd timeout 120 "$cluster" stop "$dir"
    [ "$T_RC" = 0 ] || fail "$how: tula-cluster stop failed" "$(_excerpt "$T_ERR")"
    assert_eq "" "$(leftovers "$id")" "$how: what is left of testbed $id after stop"
    if [ "$how" = crash ]; then
        grep -q "crashed: core file $real/log/core" <<<"$T_ERR" || fail "crash: stop does not name the core file" "$(_excerpt "$T_ERR")"
    fi
    for p in $pids; do  # gone, or a zombie its reaper has not collected yet
        st=$(awk '/^State:/ {print $2}' "/proc/$p/status" 2>/dev/null)
        [ -z "$st" ] || [ "$st" = Z ] || fail "$how: daemon $p still runs after stop (state $st)"
    done
    note "$how: testbed $id removed"
done
