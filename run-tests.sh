#!/usr/bin/env bash
# Run the test suite with the project's pinned environment (.venv), from any directory.
#
# Usage: ./run-tests.sh [pytest args]
#   ./run-tests.sh -q                          # everything under tests/
#   ./run-tests.sh -q -k config                # select by name
#   ./run-tests.sh tests/test_config.py -x     # only the given paths
#   ./run-tests.sh -q -m "not slow"            # without the tests of whole jobs and restarts (minutes)
#   KRAFTLAKE_TEST_WORKERS=0 ./run-tests.sh    # one process (pdb, -s); the default is 2
#
# A run that collects no test (pytest exit 5) fails: a green run must have tested something.
set -euo pipefail

# shellcheck source=scripts/venv.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/scripts/venv.sh" requirements-test.txt
kl_check_java
cd "$KL_ROOT"

# lib/ for the library; the root for benchmarks/ (the suite tests/test_bench.py runs)
export PYTHONPATH="$KL_ROOT/lib:$KL_ROOT${PYTHONPATH:+:$PYTHONPATH}"
# Spark's Python workers must use the venv too, or they import a different pyspark/pyarrow.
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$KL_PY}"
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$KL_PY}"
# The suite starts dozens of short-lived Spark JVMs (its sessions, every job it runs as a process), each
# busy compiling Spark's startup path with both JIT tiers while another test's JVM wants the same two
# cores. The quick tier alone cut a small controller job's CPU by ~20 % here (docs/performance.md, "The
# test suite's time"). Tests only: a long replay wants the optimising tier. Spark's launcher passes
# SPARK_SUBMIT_OPTS to the driver's JVM.
export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:--XX:TieredStopAtLevel=1}"

# Run all of tests/ unless paths were named (passing `tests` as well would run everything).
# Two test processes unless -n was given (KRAFTLAKE_TEST_WORKERS; 0: one, in this process, as a debugger
# needs): the suite mostly waits on JVM starts and micro-batches, so the second keeps the cores busy. The
# tests marked slow go first (tests/conftest.py), handed out one at a time, so none is left running alone at
# the end.
targets=(tests)
workers=(-n "${KRAFTLAKE_TEST_WORKERS:-2}" --dist load --maxschedchunk 1)
for a in "$@"; do
    if [[ "$a" != -* && -e "${a%%::*}" ]]; then
        targets=()
    elif [[ "$a" != -* && ( "$a" == */* || "$a" == *.py* ) ]]; then
        # pytest-xdist's processes would drop pytest's own "not found" and report no tests collected
        echo "run-tests.sh: no such test file or directory: ${a%%::*}" >&2
        exit 2
    elif [[ "$a" == -n* || "$a" == --numprocesses* ]]; then
        workers=()
    fi
done

set +e
"$KL_PY" -m pytest -rs "${workers[@]+"${workers[@]}"}" "${targets[@]+"${targets[@]}"}" "$@"  # -rs: a skipped test says why
rc=$?
set -e
if (( rc == 5 )); then
    echo "run-tests.sh: pytest collected no tests (exit 5); failing, because a run that tests nothing proves nothing." >&2
    exit 1
fi
exit "$rc"
