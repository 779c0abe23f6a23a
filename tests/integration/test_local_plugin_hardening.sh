#!/bin/bash
# The SPANK plugin is built like a hardened system component: readelf shows BIND_NOW,
# GNU_RELRO and a non-executable GNU_STACK; it needs no library but libc (no libtula, SQLite,
# GSL or C++ runtime: it plans nothing); it exports only the SPANK entry points; its objects
# were built with the stack protector and fortify (the __stack_chk_fail and __*_chk imports);
# and the link check (-z defs against Slurm's library) was built by `make check`.
. "$(dirname "$0")/lib.sh"
so=${TULA_SPANK_SO:-$REPO/build/lib/tula.so}
[ -f "$so" ] || fail "missing $so (make first)"
command -v readelf >/dev/null || fail "readelf is missing (binutils)"
dyn=$(readelf -dW "$so") segs=$(readelf -lW "$so") syms=$(readelf --dyn-syms -W "$so")
assert_match "$dyn" 'FLAGS.*BIND_NOW' "dynamic section of $so (BIND_NOW)"
assert_match "$segs" '^ *GNU_RELRO ' "program headers of $so (GNU_RELRO)"
stack=$(awk '$1 == "GNU_STACK" { print $7 }' <<<"$segs")
assert_eq RW "$stack" "GNU_STACK flags of $so (no E)"
needed=$(sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' <<<"$dyn" | sort | tr '\n' ' ')
assert_eq "libc.so.6 " "$needed" "libraries $so needs"
assert_contains "$syms" "__stack_chk_fail" "imports of $so (stack protector)"
assert_match "$syms" '__(v)?snprintf_chk' "imports of $so (_FORTIFY_SOURCE)"
exported=$(awk '$5 == "GLOBAL" && $7 != "UND" { print $8 }' <<<"$syms" | sed 's/@.*//' | sort -u | tr '\n' ' ')
for s in $exported; do
    case $s in plugin_name|plugin_type|plugin_version|spank_plugin_version|slurm_spank_*) ;;
        *) fail "$so exports $s" "exported: $exported" ;; esac
done
check=$(dirname "$so")/tula-linkcheck.so
[ -f "$check" ] || fail "missing $check: make check links the plugin with -z defs against Slurm's library"
note "ok: $so is hardened; exports: $exported"
