#!/bin/bash
# The tula command's usage contract against its manual page tula(1), the independent reference:
#   - `tula` alone exits 2 with one `tula: ` line on stderr that names exactly the commands of
#     the SYNOPSIS of man/man1/tula.1;
#   - every command of the SYNOPSIS has --help (exit 0, on stdout, nothing on stderr) that lists
#     every option the SYNOPSIS gives it, and every option a --help lists is documented in the
#     page;
#   - usage errors (unknown command, unknown option, missing argument) exit 2 with one line on
#     stderr starting with `tula: `; runtime errors exit 1 likewise;
#   - no escape sequences when standard output is not a terminal.
# No cluster needed.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA"
make_workdir
unset TULA_CONF
export XDG_DATA_HOME=$T_WORK/xdg
man1=$REPO/man/man1/tula.1
[ -r "$man1" ] || fail "missing $man1"

# The SYNOPSIS of tula(1), one command per entry: ".B tula plan" / ".B tula db list" and the
# lines up to the next .br. Prints "COMMAND<TAB>--opt --opt ..." per command.
synopsis() {
    sed -n '/^\.SH SYNOPSIS/,/^\.SH /p' "$man1" | awk '
        /^\.B tula [a-z]/ { if (cmd != "") print cmd "\t" opts; cmd = $0; sub(/^\.B tula /, "", cmd); opts = ""
                            gsub(/\\-/, "-", cmd); n = split(cmd, w, " "); cmd = ""
                            for (i = 1; i <= n && w[i] ~ /^[a-z][a-z-]*$/; i++) cmd = cmd (cmd == "" ? "" : " ") w[i] }
        /^\.br/ || /^\.SH/ { if (cmd != "") print cmd "\t" opts; cmd = ""; next }
        cmd != "" { line = $0; gsub(/\\-/, "-", line)
                    while (match(line, /-(-[a-z][a-z-]*|[a-z])([^a-z-]|$)/)) {
                        o = substr(line, RSTART, RLENGTH); sub(/[^a-z-]$/, "", o); opts = opts " " o
                        line = substr(line, RSTART + RLENGTH - 1) } }
        END { if (cmd != "") print cmd "\t" opts }'
}
syn=$(synopsis)
[ "$(count_lines "$syn" .)" -ge 8 ] || fail "could not read the SYNOPSIS of $man1" "$syn"

# 1. `tula` alone names exactly the top-level commands of the SYNOPSIS.
expected=$(cut -f1 <<<"$syn" | awk '{ print $1 }' | sort -u | tr '\n' ' ')
run_cmd "$TULA"
assert_eq 2 "$T_RC" "exit status of tula without a command"
assert_eq 1 "$(count_lines "$T_ERR" .)" "tula without a command: one line on stderr"
assert_match "$T_ERR" '^tula: a command is required: ' "tula without a command: the message"
named=$(sed -n 's/^tula: a command is required: \([^;]*\).*/\1/p' <<<"$T_ERR" | tr -d ' ' | tr ',' '\n' | sort -u | tr '\n' ' ')
assert_eq "$expected" "$named" "the commands named by tula without a command (tula(1) SYNOPSIS)"
assert_eq "" "$T_OUT" "tula without a command: nothing on stdout"

# 2. --help of every command against the page.
while IFS=$'\t' read -r cmd opts; do
    read -ra words <<<"$cmd"
    run_cmd "$TULA" "${words[@]}" --help
    assert_eq 0 "$T_RC" "exit status of tula $cmd --help"
    assert_eq "" "$T_ERR" "tula $cmd --help: nothing on stderr"
    [ -n "$T_OUT" ] || fail "tula $cmd --help printed nothing"
    assert_not_contains "$T_OUT" $'\033' "tula $cmd --help: no escape sequence when stdout is not a terminal"
    for o in $opts; do
        grep -qE -- "(^|[ ,])$o([ ,=]|$)" <<<"$T_OUT" ||
            fail "tula $cmd --help does not list $o, which tula(1) SYNOPSIS gives it" "$(_excerpt "$T_OUT" 40)"
    done
    # Each long option of the help is documented in the page.
    for o in $(grep -oE -- '(^|[ ,])--[a-z][a-z-]*' <<<"$T_OUT" | tr -d ' ,' | sort -u); do
        grep -qF -- "$(sed 's/-/\\-/g' <<<"$o")" "$man1" ||
            fail "tula $cmd --help lists $o, which tula(1) does not document"
    done
done <<<"$syn"

# 3. Usage errors: exit 2, one tula: line; runtime errors: exit 1, one tula: line.
check_err() {  # WHAT STATUS CMD...
    local what=$1 st=$2; shift 2
    run_cmd "$@"
    assert_eq "$st" "$T_RC" "$what: exit status"
    assert_match "$T_ERR" '^tula: ' "$what: message prefix"
    assert_eq 0 "$(count_lines "$T_ERR" '^[^t]|^t[^u]')" "$what: every stderr line starts with tula:"
    assert_not_contains "$T_ERR" $'\033' "$what: no escape sequence"
}
check_err "unknown command" 2 "$TULA" nosuchcommand
check_err "unknown option" 2 "$TULA" plan --workload lenet5@fashion-mnist --bogus
check_err "missing argument" 2 "$TULA" explain
check_err "profile without a subcommand" 2 "$TULA" profile
check_err "db without a subcommand" 2 "$TULA" db
check_err "unknown workload" 1 "$TULA" plan --workload nosuch@fashion-mnist --db "$T_WORK/none.db"
check_err "unknown job" 1 "$TULA" explain 999999 --db "$T_WORK/none.db"

# 4. No escape sequences in ordinary output through a pipe.
run_cmd "$TULA" db list --db "$T_WORK/none.db"
assert_not_contains "$T_OUT" $'\033' "tula db list through a pipe: no escape sequence"
# 5. On a terminal (script(1) gives a pseudo-terminal) the same output is bold, unless NO_COLOR
#    is set or TERM is dumb: the escape sequences above are absent because of the pipe alone.
if command -v script >/dev/null; then
    tty_run() { script -q -e -c "$(printf '%q ' "$TULA" db list --db "$T_WORK/none.db")" /dev/null 2>&1; }
    # (exit status 1: the database does not exist, as tula(1) says; the path is printed in bold)
    out=$(TERM=xterm tty_run || true)
    assert_contains "$out" $'\033[1m' "tula db list on a terminal: bold"
    assert_contains "$out" "none.db" "tula db list on a terminal: the database is named"
    out=$(TERM=xterm NO_COLOR=1 tty_run || true)
    assert_contains "$out" "none.db" "tula db list with NO_COLOR: the database is named"
    assert_not_contains "$out" $'\033' "tula db list on a terminal with NO_COLOR: no escape sequence"
    out=$(TERM=dumb tty_run || true)
    assert_not_contains "$out" $'\033' "tula db list on a terminal with TERM=dumb: no escape sequence"
else
    note "script(1) not installed: terminal colour not checked"
fi
note "ok"
