# bash completion for pstrain and pstrain-prep: subcommands, flags, and the
# values of flags whose --help lists them (models, optimizers, placements...).
#
# Nothing is listed here: the subcommands come from `CMD --help`, the flags
# and their values from `CMD SUB --help`, read at completion time (and kept
# for the shell's lifetime), so the completion follows the installed binary.
# Installed as share/bash-completion/completions/{pstrain,pstrain-prep};
# `source` it to use it by hand.
# shellcheck disable=SC2207 # compgen's words are single words

# _pstrain_help PROG [SUB]: the --help text of PROG (SUB), cached.
declare -gA _pstrain_help_cache 2>/dev/null || true
_pstrain_help() {
    local key="$1 ${2:-}"
    if [ -z "${_pstrain_help_cache[$key]+x}" ]; then
        _pstrain_help_cache[$key]=$("$1" ${2:+"$2"} --help 2>/dev/null)
    fi
    printf '%s\n' "${_pstrain_help_cache[$key]}"
}

# _pstrain_subcommands PROG: "  name   ..." lines of PROG --help.
_pstrain_subcommands() {
    _pstrain_help "$1" | awk -v prog="${1##*/}" \
        '/^  [a-z]+[ \t]/ { if ($1 != prog && $1 !~ /^pstrain/) print $1 }'
}

# _pstrain_flags PROG SUB: every --flag (and -o) the help of SUB shows.
_pstrain_flags() {
    _pstrain_help "$1" "$2" | grep -oE -- '(^|[^[:alnum:]-])(--[a-z][a-z0-9-]*|-o\b)' |
        sed 's/^[^-]*//' | sort -u
}

# _pstrain_flag_arg PROG SUB FLAG: the flag's argument as its help writes
# it (NAME, HxW, a|b), or nothing for a flag that takes none: the word one
# space after the flag (a description starts two or more spaces after it).
_pstrain_flag_arg() {
    _pstrain_help "$1" "$2" | grep -oE -- "(^|[[ ,])$3[ =][^ -][^ ]*" | head -1 |
        sed -E 's/^.*--[a-z0-9-]+[ =]//; s/[],:]+$//'
}

# _pstrain_flag_values PROG SUB FLAG: the values the help lists for FLAG:
# "--flag a|b|c", "--flag ARG   a | b | c (default a)" with continuation
# lines "| d", or a line "ARG: a | b | c" for the flag's ARG.
_pstrain_flag_values() {
    local arg
    arg=$(_pstrain_flag_arg "$@")
    [ -n "$arg" ] || return 0
    case $arg in
    *"|"*) # a|b|c; [FILE|DIR] is an argument's name, not values
        [[ $arg =~ ^\[?[a-z0-9][a-z0-9,.-]*(\|[a-z0-9][a-z0-9,.-]*)+\]?$ ]] &&
            printf '%s\n' "${arg//|/$'\n'}" | sed 's/^\[//; s/\]$//'
        ;;
    *)
        _pstrain_help "$1" "$2" | awk -v f="$3" -v a="$arg" '
            function take(s,   n, i, p) {
                n = split(s, p, / \| /)
                for (i = 1; i <= n; i++) { sub(/[^a-z0-9,.-].*$/, "", p[i]); if (p[i] != "") print p[i] }
            }
            /^[ \t]*-/ { on = 0 }
            on && /^[ \t]+\| / { s = $0; sub(/^[ \t]+\| /, "", s); take(s); next }
            $1 == f && $2 == a && match($0, /[ \t][a-z0-9,.-]+ \| [a-z0-9,.-]+( \| [a-z0-9,.-]+)*/) {
                take(substr($0, RSTART + 1, RLENGTH - 1)); on = 1; next }
            $1 == a ":" { s = $0; sub(/^[^:]*: /, "", s); take(s) }'
        ;;
    esac
}

# _pstrain_complete PROG: the completion of the current word for PROG.
_pstrain_complete() {
    local prog=$1 cur=${COMP_WORDS[COMP_CWORD]} prev='' sub=''
    [ "$COMP_CWORD" -gt 0 ] && prev=${COMP_WORDS[COMP_CWORD - 1]}
    COMPREPLY=()
    if [ "$COMP_CWORD" -le 1 ]; then
        COMPREPLY=($(compgen -W "$(_pstrain_subcommands "$prog") --help --version" -- "$cur"))
        return 0
    fi
    sub=${COMP_WORDS[1]}
    case " $(_pstrain_subcommands "$prog" | tr '\n' ' ') " in
    *" $sub "*) ;;
    *) return 0 ;;
    esac
    if [[ $prev == -* ]] && [ -n "$(_pstrain_flag_arg "$prog" "$sub" "$prev")" ]; then
        local values
        values=$(_pstrain_flag_values "$prog" "$sub" "$prev")
        if [ -n "$values" ]; then
            COMPREPLY=($(compgen -W "$values" -- "$cur"))
        else
            COMPREPLY=($(compgen -f -- "$cur")) # a file, a number: files are the guess
        fi
        return 0
    fi
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$(_pstrain_flags "$prog" "$sub")" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
    return 0
}

_pstrain() { _pstrain_complete "${COMP_WORDS[0]}"; }
complete -o filenames -F _pstrain pstrain
complete -o filenames -F _pstrain pstrain-prep
