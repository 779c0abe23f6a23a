#!/usr/bin/env bash
# test-alone
# make install with a custom prefix into a temporary DESTDIR: the installed tree is complete and
# usable: binaries run, libtula's library, headers and pkg-config file are not installed,
# tula.so exports only the symbols Slurm looks up, the plugstack snippet and cli_filter.lua carry the installed paths, man pages render;
# make uninstall then removes every file make install put there, and keeps an edited tula.conf.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA"
BUILD=$(cd "$(dirname "$TULA")/.." && pwd)
make_workdir
D=$T_WORK/destdir
P=/opt/tula-test-prefix
SYSCONF=$P/etc/slurm
PLUGDIR=$P/lib/slurm
note "make install B=$BUILD prefix=$P DESTDIR=$D"
# sysconfdir reaches the default tula.conf path compiled into tula: rebuild the default after.
on_exit "make -s -C '$REPO' B='$BUILD' all >/dev/null 2>&1"
expect_ok "make install" make -s -C "$REPO" B="$BUILD" install prefix="$P" DESTDIR="$D" sysconfdir="$SYSCONF" \
    slurmplugindir="$PLUGDIR"
R=$D$P

# Binaries run (from the installed tree, with the installed library path).
for b in tula tula-train; do
    [ -x "$R/bin/$b" ] || fail "missing $R/bin/$b"
done
expect_ok "installed tula --version" "$R/bin/tula" --version
assert_eq "tula $(cat "$REPO/VERSION")" "$T_OUT" "tula --version output vs the file VERSION"
# the installed tula's default tula.conf is the one under the installed sysconfdir
run_cmd "$R/bin/tula" plan --help
assert_contains "$T_OUT" "$SYSCONF/tula.conf" "tula plan --help of the installed tula: its default tula.conf (sysconfdir)"
expect_ok "installed tula-train --help" "$R/bin/tula-train" --help

# No library, headers or pkg-config file: nothing outside the repository links libtula.
for f in lib/libtula.so.0 lib/libtula.so lib/libtula.a include/tula lib/pkgconfig/tula.pc; do
    [ ! -e "$R/$f" ] || fail "$R/$f is installed; libtula is internal to the tula programs"
done

# The Python package, in the dist-packages directory of Debian's python3 for the prefix.
minor=$(/usr/bin/python3 -c 'import sys; print(sys.version_info[1])')
PYDIR=$R/lib/python3.$minor/dist-packages
[ -f "$PYDIR/tula/__init__.py" ] || fail "missing $PYDIR/tula/__init__.py"
expect_ok "import the installed tula package" env -u PYTHONPATH PYTHONPATH="$PYDIR" /usr/bin/python3 -c \
    'import tula, sys; assert tula.__file__.startswith(sys.argv[1]), tula.__file__; print(tula.plan(env={}).global_batch)' "$PYDIR"
assert_eq 64 "$T_OUT" "tula.plan() of the installed package"

# SPANK plugin: present, exporting only what Slurm looks up.
SO=$D$PLUGDIR/tula.so
[ -f "$SO" ] || fail "missing $SO"
syms=$(nm -D --defined-only "$SO" | awk '$2 != "A" { print $3 }')
assert_contains "$syms" "slurm_spank_init" "tula.so exports slurm_spank_init"
assert_contains "$syms" "plugin_name" "tula.so exports plugin_name"
other=$(grep -vE '^(plugin_(name|type|version)|slurm_spank_[a-z_]+|spank_plugin_version|spank_options)$' <<<"$syms" || true)
assert_eq "" "$other" "tula.so exports only plugin_*, slurm_spank_*, spank_plugin_version/spank_options"

# Plugstack snippet and cli_filter.lua with the installed paths.
snippet=$D$SYSCONF/plugstack.conf.d/tula.conf
[ -f "$snippet" ] || fail "missing $snippet"
assert_match "$(cat "$snippet")" "^optional $PLUGDIR/tula.so conf=$SYSCONF/tula.conf" "plugstack snippet paths"
assert_not_contains "$(cat "$snippet")" "@" "plugstack snippet: no placeholder left"
lua=$D$SYSCONF/cli_filter.lua
[ -f "$lua" ] || fail "missing $lua"
assert_contains "$(cat "$lua")" "T.TULA_BIN = \"$P/bin/tula\"" "cli_filter.lua: @TULA_BIN@ substituted"
assert_not_contains "$(grep -v '^ *--' "$lua")" "@TULA_BIN@" "cli_filter.lua: no @TULA_BIN@ left in code"
[ -f "$D$SYSCONF/tula.conf" ] || fail "missing $D$SYSCONF/tula.conf"

# Man pages render without warnings.
for m in man1/tula.1 man1/tula-train.1 man5/tula.conf.5 man8/spank-tula.8; do
    f=$R/share/man/$m
    [ -f "$f" ] || fail "missing man page $f"
    out=$(MANWIDTH=80 man -l "$f" 2>&1 >/dev/null)
    [ -z "$out" ] || fail "man -l $m warns" "$out"
    [ "$(MANWIDTH=80 man -l "$f" 2>/dev/null | wc -l)" -gt 20 ] || fail "man -l $m renders almost nothing"
done

# make uninstall: no file is left, twice (once with the example tula.conf, once with an edited one).
UNINSTALL=(make -s -C "$REPO" B="$BUILD" uninstall prefix="$P" DESTDIR="$D" sysconfdir="$SYSCONF" slurmplugindir="$PLUGDIR")
expect_ok "make uninstall" "${UNINSTALL[@]}"
assert_eq "" "$(find "$D" -type f)" "files left after make uninstall"
expect_ok "make install (again)" make -s -C "$REPO" B="$BUILD" install prefix="$P" DESTDIR="$D" sysconfdir="$SYSCONF" \
    slurmplugindir="$PLUGDIR"
echo "max_nodes = 3" >> "$D$SYSCONF/tula.conf"
expect_ok "make uninstall (edited tula.conf)" "${UNINSTALL[@]}"
assert_eq "$D$SYSCONF/tula.conf" "$(find "$D" -type f)" "files left after make uninstall: the edited tula.conf only"
assert_contains "$T_OUT$T_ERR" "kept $D$SYSCONF/tula.conf" "make uninstall says it kept the edited tula.conf"
note "ok"
