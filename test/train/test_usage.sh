#!/usr/bin/env bash
# What a new user types: -h and --help on every command of both programs,
# flags from other frameworks (--batch-size, --learning-rate) answered with
# the nearest flag and a pointer to --help, one error prefix style
# ("PROGRAM COMMAND: message") in every command, and exit status 2 for every
# usage error. Small generated data sets only.
. "$(dirname "$0")/lib.sh"
P=$PSTRAIN
Q=$PSTRAIN_PREP
"$MKDATA" "$tmp/ok.h5" 64 16 28 28 1 10 || { echo "mkdata failed"; exit 1; }

# usage_case NAME STATUS PREFIX 'NEEDLE1|NEEDLE2' CMD ARGS...: CMD exits with
# STATUS, stderr is one line that starts with PREFIX and holds every needle.
usage_case() {
    local name=$1 want=$2 prefix=$3 needles=$4 rc n lines
    shift 4
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ "$rc" = "$want" ] || bad "$name: exit status $rc, expected $want ($*)"
    lines=$(grep -c . "$tmp/err")
    [ "$lines" = 1 ] || { bad "$name: $lines lines on stderr, expected one"; head -5 "$tmp/err"; }
    case "$(head -1 "$tmp/err")" in
    "$prefix: "*) ;;
    *) bad "$name: error does not start with '$prefix: ': $(head -1 "$tmp/err")" ;;
    esac
    local IFS='|'
    for n in $needles; do
        grep -qF -- "$n" "$tmp/err" || bad "$name: message does not mention '$n': $(head -1 "$tmp/err")"
    done
    echo "  $name (exit $rc): $(head -1 "$tmp/err")"
}

say "-h and --help on every command"
for c in "$P train" "$P eval" "$P plan" "$P" "$Q idx" "$Q png" "$Q info" "$Q verify" "$Q preview" "$Q"; do
    for h in -h --help; do
        # shellcheck disable=SC2086
        out=$($c $h 2>"$tmp/err")
        rc=$?
        [ $rc = 0 ] || bad "$c $h: exit status $rc: $(head -1 "$tmp/err")"
        case "$out" in usage:*) ;; *) bad "$c $h: no usage text on stdout" ;; esac
    done
done
# -h after other flags, too
"$P" train --data "$tmp/ok.h5" -h >/dev/null 2>&1 || bad "train --data F -h does not print help"

say "unknown flags: the nearest flag, and --help"
T=(pstrain train)
usage_case "--batch-size" 2 "pstrain train" "'--batch-size'|did you mean --batch?|pstrain train --help" \
    "$P" train --data "$tmp/ok.h5" --batch-size 32
usage_case "--learning-rate" 2 "pstrain train" "did you mean --lr?" \
    "$P" train --data "$tmp/ok.h5" --learning-rate 0.1
usage_case "--learning_rate=0.1" 2 "pstrain train" "'--learning_rate'|did you mean --lr?" \
    "$P" train --data "$tmp/ok.h5" --learning_rate=0.1
usage_case "--num-epochs" 2 "pstrain train" "did you mean --epochs?" \
    "$P" train --data "$tmp/ok.h5" --num-epochs 3
usage_case "--optimiser" 2 "pstrain train" "did you mean --optimizer?" \
    "$P" train --data "$tmp/ok.h5" --optimiser adam
usage_case "no near flag" 2 "pstrain train" "'--zzzzzz'|pstrain train --help" \
    "$P" train --data "$tmp/ok.h5" --zzzzzz
grep -q "did you mean" "$tmp/err" && bad "--zzzzzz: a suggestion for a flag nothing resembles"
usage_case "ambiguous prefix" 2 "pstrain train" "'--adam'|ambiguous" "$P" train --data "$tmp/ok.h5" --adam 1
usage_case "missing value" 2 "pstrain train" "--batch needs a value" "$P" train --data "$tmp/ok.h5" --batch
usage_case "eval --chekpoint" 2 "pstrain eval" "did you mean --checkpoint?|pstrain eval --help" \
    "$P" eval --data "$tmp/ok.h5" --chekpoint c
usage_case "plan --modle" 2 "pstrain plan" "did you mean --model?" "$P" plan --modle lenet5 --ps 2
usage_case "command trian" 2 "pstrain" "did you mean train?" "$P" trian
usage_case "png --thread" 2 "pstrain-prep png" "did you mean --threads?|pstrain-prep png --help" \
    "$Q" png "$tmp" --thread 2 -o "$tmp/x.h5"
usage_case "idx --output-file" 2 "pstrain-prep idx" "did you mean --output?" \
    "$Q" idx --train-images a --train-labels b --output-file x.h5
usage_case "preview --cont" 2 "pstrain-prep preview" "did you mean --count?" \
    "$Q" preview "$tmp/ok.h5" --cont 3 -o "$tmp/g.png"
usage_case "info --verbose" 2 "pstrain-prep info" "'--verbose'" "$Q" info --verbose "$tmp/ok.h5"
usage_case "command prevew" 2 "pstrain-prep" "did you mean preview?" "$Q" prevew

say "every usage error exits 2"
usage_case "--epochs 0" 2 "pstrain train" "--epochs 0|--steps" "$P" train --data "$tmp/ok.h5" --epochs 0
usage_case "--lr 2000000" 2 "pstrain train" "--lr|at most 1e+06|2000000" \
    "$P" train --data "$tmp/ok.h5" --lr 2000000
usage_case "--batch 0" 2 "pstrain train" "--batch|'0'" "$P" train --data "$tmp/ok.h5" --batch 0
usage_case "--eval-split bogus" 2 "pstrain train" "--eval-split|train, val or test" \
    "$P" train --data "$tmp/ok.h5" --eval-split bogus
usage_case "stray argument" 2 "pstrain train" "'stray'" "$P" train --data "$tmp/ok.h5" stray
usage_case "eval stray argument" 2 "pstrain eval" "'stray'" "$P" eval --data "$tmp/ok.h5" --checkpoint c stray
usage_case "verify two files" 2 "pstrain-prep verify" "FILE.h5" "$Q" verify a.h5 b.h5
usage_case "preview to .jpg" 2 "pstrain-prep preview" "x.jpg|.png" "$Q" preview "$tmp/ok.h5" -o "$tmp/x.jpg"
[ -e "$tmp/x.jpg" ] && bad "preview wrote x.jpg"

say "one prefix for run-time errors (exit 1)"
usage_case "train missing data" 1 "pstrain train" "nonexistent.h5" "$P" train --quiet --data "$tmp/nonexistent.h5"
usage_case "eval missing checkpoint" 1 "pstrain eval" "$tmp/nock" "$P" eval --data "$tmp/ok.h5" --checkpoint "$tmp/nock"
usage_case "info missing file" 1 "pstrain-prep info" "nonexistent.h5" "$Q" info "$tmp/nonexistent.h5"
usage_case "verify missing file" 1 "pstrain-prep verify" "nonexistent.h5" "$Q" verify "$tmp/nonexistent.h5"
usage_case "idx missing input" 1 "pstrain-prep idx" "nonexistent" \
    "$Q" idx --train-images "$tmp/nonexistent" --train-labels "$tmp/nonexistent2" -o "$tmp/i.h5"
usage_case "png missing dir" 1 "pstrain-prep png" "nodir" "$Q" png "$tmp/nodir" -o "$tmp/p.h5"
usage_case "preview missing split" 1 "pstrain-prep preview" "no 'val' split|train, test" \
    "$Q" preview "$tmp/ok.h5" --split val -o "$tmp/g.png"
finish
