#!/usr/bin/env bash
# check_completion.sh FILE - the bash completion FILE, sourced, completes the
# pstrain and pstrain-prep found on PATH: subcommands, flags, flag values.
# Called with COMP_WORDS/COMP_CWORD set, as bash does. Exit 0 when all hold.
set -u
file=${1:?completion file}
{ command -v pstrain && command -v pstrain-prep; } >/dev/null ||
    { echo "FAIL: pstrain and pstrain-prep must be on PATH"; exit 1; }
# shellcheck disable=SC1090
. "$file"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
complete_words() { # the completions of the last word, space-delimited
    COMP_WORDS=("$@")
    COMP_CWORD=$(($# - 1))
    COMPREPLY=()
    _pstrain
    echo " ${COMPREPLY[*]} "
}
expect() { # words... -- wanted...
    local w=() got
    while [ "$1" != -- ]; do w+=("$1"); shift; done
    shift
    got=$(complete_words "${w[@]}")
    for x in "$@"; do
        case $got in *" $x "*) ;; *) bad "completion of '${w[*]}': '$got' lacks $x" ;; esac
    done
}
[ "$(complete -p pstrain)" = "complete -o filenames -F _pstrain pstrain" ] || bad "pstrain: $(complete -p pstrain)"
[ -n "$(complete -p pstrain-prep)" ] || bad "no completion for pstrain-prep"
expect pstrain "" -- train eval plan --version --help
expect pstrain train --mo -- --model --momentum --moving-average-decay
expect pstrain train --model "" -- lenet5 mlp resnet-20 resnet-50 inception-v3
expect pstrain train --model res -- resnet-20 resnet-56 resnet-50
expect pstrain train --optimizer "" -- sgd momentum rmsprop adam
expect pstrain train --augment "" -- inception resnet crop,flip none
expect pstrain train --placement "" -- round-robin greedy partition
expect pstrain train --mode "" -- sync async
expect pstrain train --eval-split "" -- train val test
expect pstrain plan --model "" -- lenet5 resnet-50
expect pstrain eval --sp -- --split
expect pstrain eval --split "" -- test val train
expect pstrain-prep "" -- idx images png info verify preview --version
expect pstrain-prep images --st -- --store --strict
expect pstrain-prep images --store "" -- pixels encoded
expect pstrain-prep preview x.h5 - -- -o --count --first
# a flag without a value: the next word is a flag again
[ "$(complete_words pstrain train --nesterov --epo)" = " --epochs " ] ||
    bad "after --nesterov: '$(complete_words pstrain train --nesterov --epo)'"
# every model of train's --help is offered
models=$(pstrain train --help | sed -n 's/^ *--model NAME *\([^(]*\) (default.*/\1/p' | tr -d '|')
for m in $models; do expect pstrain train --model "" -- "$m"; done
[ -n "$models" ] || bad "no models in pstrain train --help"
[ "$fail" = 0 ] && echo "completion: ok"
exit $fail
