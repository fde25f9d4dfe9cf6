#!/usr/bin/env bash
# The README's test command: installs what is missing, builds pstrain with
# warnings as errors, runs every test suite, then the unit and cli tests again
# under AddressSanitizer + UndefinedBehaviorSanitizer, the threaded unit
# tests under ThreadSanitizer, and the tests that start MPI ranks with
# pstrain built against MPICH. Ends with "N passed, N failed".
#
#   bash jobs/test.sh            everything
#   SUITES="unit cli" bash jobs/test.sh   only some suites (sanitizer run too)
#   MPICH=0 bash jobs/test.sh             without the MPICH build's tests
set -uo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
bash jobs/install-deps.sh || exit 1

build=${BUILD_DIR:-build-test}
asan=${ASAN_BUILD_DIR:-build-asan}
suite_args=()
for s in ${SUITES:-}; do suite_args+=(--suite "$s"); done

configure() { # dir, extra meson options...
    local dir=$1; shift
    if [ -f "$dir/build.ninja" ]; then
        meson configure "$dir" "$@" >/dev/null
    else
        meson setup "$dir" "$@" >/dev/null
    fi
}

# suite_targets DIR SUITE...: the files (relative to DIR) that the tests of
# the suites depend on, from meson's introspection, one a line.
suite_targets() {
    python3 - "$@" <<'PY'
import json, os, subprocess, sys
d, suites = sys.argv[1], set(sys.argv[2:])
tests = json.loads(subprocess.check_output(["meson", "introspect", d, "--tests"]))
targets = {t["id"]: t for t in json.loads(subprocess.check_output(["meson", "introspect", d, "--targets"]))}
need = {i for t in tests if suites & {s.split(":")[-1] for s in t["suite"]} for i in t["depends"]}
print("\n".join(sorted(os.path.relpath(f, os.path.abspath(d)) for i in need for f in targets[i]["filename"])))
PY
}

# phase NAME: prints how long the previous phase took, to see where CI's
# minutes go (the build phases reuse objects through ccache where the
# flags allow: the MPICH build's nn, data and util layers)
phase_t=$SECONDS phase_name=
phase() {
    [ -n "$phase_name" ] && echo "jobs/test.sh: $phase_name took $((SECONDS - phase_t)) s"
    phase_name=$1 phase_t=$SECONDS
}

status=0
phase "release build"
configure "$build" -Dwerror=true -Dbuildtype=release || exit 1
ninja -C "$build" || exit 1
phase "release tests"
meson test -C "$build" --print-errorlogs --num-processes 2 "${suite_args[@]}" || status=1

# Sanitizers: the unit and cli suites under ASan+UBSan (leak checks on, but
# in the MPI program itself, see src/cmd/main.c); library allocations that
# live as long as the process are suppressed by name in test/lsan.supp.
# Only what those suites' tests depend on is built (meson's test list: 179 of
# the 215 build steps; not the benchmarks, the mpi/e2e tools or the
# Fashion-MNIST conversion); a test whose program is missing would fail.
phase "ASan build"
configure "$asan" -Dwerror=true -Dbuildtype=debugoptimized -Db_sanitize=address,undefined \
    -Db_lundef=false || exit 1
mapfile -t asan_targets < <(suite_targets "$asan" unit cli)
[ "${#asan_targets[@]}" -gt 0 ] || { echo "jobs/test.sh: no targets for the unit and cli suites in $asan"; exit 1; }
ninja -C "$asan" "${asan_targets[@]}" || exit 1
phase "ASan tests"
ASAN_OPTIONS=abort_on_error=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
LSAN_OPTIONS=suppressions=$top/test/lsan.supp:print_suppressions=0 \
    meson test -C "$asan" --no-rebuild --print-errorlogs --num-processes 2 --suite unit --suite cli \
    --timeout-multiplier 4 || status=1

# ThreadSanitizer: the threaded unit tests (the input pipeline, the model's
# thread pool test/nn/test_pool.c, the convolutions on it
# test/nn/test_conv_threads.c, profiled steps on 2 threads test/nn/test_prof.c, JPEG decodes on 4 threads test/jpeg/test_jpeg.c,
# and a training run whose reader thread streams the split while the main thread writes checkpoints and evaluates,
# test/train/test_h5lock.c). Only those targets are built. No suppressions: the reports would be pstrain's.
tsan=${TSAN_BUILD_DIR:-build-tsan}
tsan_tests=(pipeline pipe-encoded augment h5lock nn-pool nn-conv-threads nn-prof jpeg)
phase "TSan build"
configure "$tsan" -Dwerror=true -Dbuildtype=debugoptimized -Db_sanitize=thread \
    -Db_lundef=false || exit 1
ninja -C "$tsan" test/data/test_pipeline test/data/test_pipe_encoded test/data/test_augment \
    test/train/test_h5lock test/nn/test_nn_pool test/nn/test_nn_conv_threads test/nn/test_nn_prof \
    test/jpeg/test_jpeg || exit 1
phase "TSan tests"
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    meson test -C "$tsan" --no-rebuild --print-errorlogs --num-processes 2 \
    --timeout-multiplier 4 "${tsan_tests[@]}" || status=1

# MPICH: the mpi suite and the e2e tests that start ranks (suite e2e-mpi:
# the other e2e tests run one process, which never initialises MPI), except
# those whose subject lies above the MPI layer (suite one-mpi), again
# with pstrain built against MPICH and launched by its mpiexec
# (-Dmpi=mpich), with the cross-MPI test: the same sync runs under Open
# MPI's build and MPICH's end bitwise equal. Skipped with MPICH=0; only what
# those tests need is built.
mpich=${MPICH_BUILD_DIR:-build-mpich}
mpich_dirs=()
mpich_suites=()
for s in ${SUITES:-mpi e2e}; do
    case $s in
    mpi) mpich_suites+=(--suite mpi) ;;
    e2e) mpich_suites+=(--suite e2e-mpi) ;;
    esac
done
if [ "${MPICH:-1}" != 0 ] && [ ${#mpich_suites[@]} -gt 0 ]; then
    mpich_dirs=("$mpich")
    phase "MPICH build"
    configure "$mpich" -Dwerror=true -Dbuildtype=release -Dmpi=mpich || exit 1
    mapfile -t mpich_targets < <(suite_targets "$mpich" mpi e2e-mpi)
    [ "${#mpich_targets[@]}" -gt 0 ] || { echo "jobs/test.sh: no targets for the mpi and e2e-mpi suites in $mpich"; exit 1; }
    ninja -C "$mpich" "${mpich_targets[@]}" || exit 1
    phase "MPICH tests"
    PSTRAIN_OTHER_MPI=$(cd "$build" && pwd)/pstrain \
        meson test -C "$mpich" --no-rebuild --print-errorlogs --num-processes 2 "${mpich_suites[@]}" \
        --no-suite one-mpi ||
        status=1
fi

phase ""
python3 - "$build" "$asan" "$tsan" "${mpich_dirs[@]}" <<'PY'
import json, sys
passed = failed = skipped = 0
bad = []
for d in sys.argv[1:]:
    try:
        lines = open(f"{d}/meson-logs/testlog.json").read().splitlines()
    except OSError:
        continue
    for line in lines:
        t = json.loads(line)
        r = t.get("result")
        if r in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif r == "SKIP":
            skipped += 1
        else:
            failed += 1
            bad.append(f"{d}: {t.get('name')} ({r}, {t.get('duration', 0):.1f} s)")
# the names of the failures just above the last line, where a CI excerpt
# (which keeps only the end of the output) still shows them
for b in bad:
    print(f"failed: {b}")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
exit $status
