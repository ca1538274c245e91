#!/usr/bin/env bash
# Run a kraftlake job with the project's own pinned Spark (.venv), from any directory.
#
# Usage: ./spark-submit.sh [spark-submit options] jobs/X.py [job args]
#   ./spark-submit.sh jobs/controller.py --warehouse W                      # local[*,4], no services
#   ./spark-submit.sh --master spark://host:7077 --conf spark.x=y jobs/sql.py --warehouse W "SELECT 1"
#
# Options before the job go to spark-submit unchanged. Added for you: --master local[*,4] (unless
# you chose a master), --py-files build/kraftlake-<content hash>.zip (merged with yours), PYSPARK_PYTHON /
# PYSPARK_DRIVER_PYTHON = the venv's python (unless set), PYTHONPATH += lib, and a WARN-level
# conf/log4j2.properties (unless you pass driver Java options yourself). Jobs that need no Spark (dump,
# check, report, quorum, ingest, simulate; any job's --help) run on that python directly, without a JVM
# (KRAFTLAKE_SPARK_SUBMIT=always: through spark-submit anyway). Data on stdout, messages on stderr.
set -euo pipefail

# shellcheck source=scripts/venv.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/scripts/venv.sh" requirements.txt

# Before Spark starts: Java, and the JVM side must be the Spark that matches the venv's pyspark, whatever
# SPARK_HOME says.
use_pinned_spark() {
    local spark_home
    kl_check_java
    spark_home="$("$KL_PY" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("pyspark").origin))')" \
        || { echo "spark-submit.sh: pyspark is not importable from $KL_VENV" >&2; exit 1; }
    if [[ -n "${SPARK_HOME:-}" && "$SPARK_HOME" != "$spark_home" ]]; then
        echo "spark-submit.sh: ignoring SPARK_HOME=$SPARK_HOME; using the pinned Spark in .venv" >&2
    fi
    export SPARK_HOME="$spark_home"
}
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$KL_PY}"
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$KL_PY}"
export PYTHONPATH="$KL_ROOT/lib${PYTHONPATH:+:$PYTHONPATH}"

usage() {
    sed -n '2,13s/^# \{0,1\}//p' "$KL_ROOT/spark-submit.sh" >&2
    exit 2
}

# spark-submit's options that take no value; every other option takes one (SparkSubmitOptionParser).
is_flag() {
    case "$1" in
        --help|-h|--verbose|-v|--version|--supervise|--usage-error) return 0 ;;
        *) return 1 ;;
    esac
}

spark_opts=()
user_py_files=()
have_master=false
master="${MASTER:-}"
have_java_opts=false
cluster_mode=false
job=""

add_py_files() { local IFS=','; local f; for f in $1; do [[ -n "$f" ]] && user_py_files+=("$f"); done; return 0; }

# Walk the options the way spark-submit does: the first argument that is not an option or an
# option's value is the job. Looking at values keeps `--py-files extra.py jobs/x.py` right.
while (( $# > 0 )); do
    arg="$1"
    if [[ "$arg" != -* ]]; then
        job="$arg"
        shift
        break
    fi
    if is_flag "$arg"; then
        spark_opts+=("$arg")
        shift
        continue
    fi
    if [[ "$arg" == --*=* ]]; then
        name="${arg%%=*}"
        value="${arg#*=}"
        shift
    else
        (( $# >= 2 )) || { echo "spark-submit.sh: option $arg needs a value" >&2; usage; }
        name="$arg"
        value="$2"
        shift 2
    fi
    case "$name" in
        --py-files)
            add_py_files "$value"
            continue ;;  # merged into one --py-files below
        --master)
            have_master=true
            master="$value" ;;
        --driver-java-options)
            have_java_opts=true ;;
        --deploy-mode)
            [[ "$value" == cluster ]] && cluster_mode=true ;;
        --conf|-c)
            case "$value" in
                spark.master=*) have_master=true; master="${value#spark.master=}" ;;
                spark.driver.extraJavaOptions=*) have_java_opts=true ;;
                spark.submit.deployMode=cluster) cluster_mode=true ;;
            esac ;;
    esac
    spark_opts+=("$name" "$value")
done

if [[ -z "$job" ]]; then
    # `./spark-submit.sh --version` / `--help` are still useful without a job.
    for o in "${spark_opts[@]+"${spark_opts[@]}"}"; do
        case "$o" in --version|--help|-h) use_pinned_spark; exec "$KL_VENV/bin/spark-submit" "${spark_opts[@]}" ;; esac
    done
    echo "spark-submit.sh: no job given" >&2
    usage
fi
if [[ "$job" != *.py ]]; then
    echo "spark-submit.sh: the job must be a Python file (jobs/X.py), got '$job'" >&2
    usage
fi
[[ -f "$job" ]] || { echo "spark-submit.sh: job file not found: $job" >&2; exit 2; }

# A job of this repository that needs no Spark here (kraftlake.cli.launcher says which) runs on the venv's
# python straight away: no JVM to start. In cluster deploy mode the driver is wanted on the cluster.
job_name="$(basename "$job" .py)"
if [[ "$(realpath -- "$job")" == "$(realpath -m -- "$KL_ROOT/jobs/$job_name.py")" ]] && ! $cluster_mode \
        && [[ "${KRAFTLAKE_SPARK_SUBMIT:-}" != always ]] \
        && [[ "$("$KL_PY" -m kraftlake.cli.launcher "$job_name" "$@" 2>/dev/null)" == python ]]; then
    if (( ${#spark_opts[@]} + ${#user_py_files[@]} > 0 )); then
        echo "spark-submit.sh: $job needs no Spark: running it on the venv's python, without the spark-submit options" >&2
    fi
    unset KRAFTLAKE_PROGRESS_TERMINAL  # its stderr is this script's: the job sees for itself whether it is a terminal
    exec "$PYSPARK_DRIVER_PYTHON" "$job" "$@"
fi

use_pinned_spark

# Ship the library to executors: a zip built every run (cheap) and named by its content. A running
# job keeps reading its zip (Python's zipimport reads it again for every module it imports), so a run
# of changed code must not replace it: a new content gets a new name (old ones stay; build/ is scratch).
mkdir -p "$KL_ROOT/build"
zip_path="$("$KL_PY" - "$KL_ROOT/lib" "$KL_ROOT/build" "$KL_ROOT/schemas" <<'PY'
import hashlib, os, sys, tempfile, zipfile
lib, build, schemas = sys.argv[1], sys.argv[2], sys.argv[3]
fd, tmp = tempfile.mkstemp(dir=build, suffix=".zip.tmp")
os.close(fd)
with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
    for dirpath, dirnames, filenames in os.walk(os.path.join(lib, "kraftlake")):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = os.path.join(dirpath, name)
            zf.write(path, os.path.relpath(path, lib))
    # the message and table schemas travel inside the package (kraftlake.metadata.schemas.schema_dir)
    for dirpath, dirnames, filenames in os.walk(schemas):
        dirnames.sort()
        for name in sorted(f for f in filenames if f.endswith((".avsc", ".json"))):
            path = os.path.join(dirpath, name)
            zf.write(path, os.path.join("kraftlake", "_schemas", os.path.relpath(path, schemas)))
with open(tmp, "rb") as handle:
    out = os.path.join(build, f"kraftlake-{hashlib.sha256(handle.read()).hexdigest()[:16]}.zip")
os.replace(tmp, out)  # same content, same bytes: replacing a zip in use with itself is harmless
print(out)
PY
)"

py_files="$zip_path"
for f in "${user_py_files[@]+"${user_py_files[@]}"}"; do
    if [[ "$f" != "$zip_path" && "$(realpath -m -- "$f" 2>/dev/null || echo "$f")" != "$zip_path" ]]; then
        case ",$py_files," in *",$f,"*) ;; *) py_files="$py_files,$f" ;; esac
    fi
done

extra=()
if ! $have_master && [[ -z "${MASTER:-}" ]]; then
    # local[N,F]: a failed task is retried (F attempts in all), as spark.task.maxFailures does on a cluster;
    # plain local[*] gives every task one attempt, so one transient failure ends a streaming query.
    extra+=(--master 'local[*,4]')
    master='local[*,4]'
fi
if [[ "$master" == local* ]]; then
    # Local mode talks to nobody: Spark's web UI (when enabled) binds SPARK_LOCAL_IP, else every interface;
    # the driver's RPC and block manager are bound to loopback by kraftlake.spark.session.
    export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
fi
extra+=(--py-files "$py_files")
if ! $have_java_opts && ! $cluster_mode; then
    # Driver logging only: in cluster mode the driver runs elsewhere and this file is not there.
    extra+=(--driver-java-options "-Dlog4j2.configurationFile=file:$KL_ROOT/conf/log4j2.properties")
fi

# A job that talks with the terminal (jobs/sql.py's shell, stdin, Ctrl-C; it says so with a line
# "# spark-submit.sh: driver first") runs the way bin/pyspark runs its shell: Python first, and pyspark
# starts Spark's JVM as its child with these options. Under spark-submit the Python driver would be the
# JVM's child, with no stdin, its stderr merged into stdout, and Ctrl-C stopping the JVM.
if ! $cluster_mode && grep -qx '# spark-submit.sh: driver first' "$job"; then
    PYSPARK_SUBMIT_ARGS="$("$KL_PY" -c 'import shlex, sys; print(shlex.join(sys.argv[1:]))' \
        "${spark_opts[@]+"${spark_opts[@]}"}" "${extra[@]}" pyspark-shell)"
    export PYSPARK_SUBMIT_ARGS
    exec "$KL_PY" "$job" "$@"
fi

# Spark starts the Python driver with its stderr merged into its stdout (PythonRunner), copied to the
# JVM's stdout, and Java closes every other descriptor in the processes it starts: the job's messages
# would land in the middle of its data. So the driver gets a FIFO by its path (KRAFTLAKE_STDERR_FIFO),
# read into this script's stderr; kraftlake.cli.launcher points the driver's stderr at it. The JVM holds
# it open for writing on fd 3, so its reader lives as long as the JVM and the driver, whichever ends last,
# then removes it. Without mkfifo, or in cluster deploy mode (the driver runs elsewhere), the driver's
# stderr goes where Spark sends it, as before.
progress_fd=1
if ! $cluster_mode && command -v mkfifo >/dev/null 2>&1 \
        && fifo_dir="$(mktemp -d "${TMPDIR:-/tmp}/kraftlake-stderr.XXXXXX" 2>/dev/null)"; then
    if mkfifo -m 600 "$fifo_dir/stderr" 2>/dev/null; then
        exec 4<>"$fifo_dir/stderr"  # a reader and a writer of our own while both sides open: no open waits
        # the reader outlives a SIGTERM or SIGINT to the process group: it ends when the writers have, with
        # the driver's last lines (how it stopped) passed on
        { trap "" TERM INT; exec 4<&-; cat "$fifo_dir/stderr" >&2; rm -rf "$fifo_dir"; } </dev/null >/dev/null &
        exec 3>"$fifo_dir/stderr" 4<&-
        export KRAFTLAKE_STDERR_FIFO="$fifo_dir/stderr"
        progress_fd=2
    else
        rm -rf "$fifo_dir"
    fi
fi
# Progress lines (kraftlake.progress=auto) when the driver's stderr ends on a terminal.
if [[ -t $progress_fd ]]; then export KRAFTLAKE_PROGRESS_TERMINAL=1; else unset KRAFTLAKE_PROGRESS_TERMINAL; fi
# The driver asks for SIGTERM when its parent, the JVM, dies, and when this script is gone.
export KRAFTLAKE_LAUNCHER_PID=$$
if $cluster_mode || ! pid_file="$(mktemp "${TMPDIR:-/tmp}/kraftlake-driver.XXXXXX" 2>/dev/null)"; then
    exec "$KL_VENV/bin/spark-submit" "${spark_opts[@]+"${spark_opts[@]}"}" "${extra[@]}" "$job" "$@"
fi

# SIGTERM (kill, a service manager's stop) is the Python driver's to handle: it stops its queries between
# two steps, gives its lease back and exits 130, and the JVM, its parent, then exits with that code. Taken
# by the JVM, it would shut Spark down under the driver's feet (tracebacks, a lease left behind). So the
# JVM starts with SIGTERM ignored (a SIGTERM to the whole process group reaches the driver alone), and
# this script stays in front of it: it hands SIGTERM to the driver, which writes its pid to
# KRAFTLAKE_DRIVER_PID_FILE as it starts (while there is no driver yet, nothing has begun: the JVM is
# killed), and ends with the JVM's exit code (130 when it was killed so). The JVM runs in the background,
# so it ignores SIGINT as well: Ctrl-C reaches the driver, which is in the same process group.
export KRAFTLAKE_DRIVER_PID_FILE="$pid_file"
trap '' TERM
"$KL_VENV/bin/spark-submit" "${spark_opts[@]+"${spark_opts[@]}"}" "${extra[@]}" "$job" "$@" &
jvm=$!
terminated=false
forward_term() {
    local driver=""
    terminated=true
    [[ -s "$pid_file" ]] && driver="$(<"$pid_file")"
    if [[ -z "$driver" ]] || ! kill -TERM "$driver" 2>/dev/null; then
        kill -KILL "$jvm" 2>/dev/null || true
    fi
}
trap forward_term TERM
trap : INT  # the driver has it (above); wait for the JVM to end
status=0
while :; do
    # (bash's own notice of a JVM killed by a signal is not shown: the driver says what happened, below)
    wait "$jvm" 2>/dev/null && status=0 || status=$?
    kill -0 "$jvm" 2>/dev/null || break  # wait was cut short by a signal: the JVM is still running
done
# A JVM killed or crashed under its driver: the driver, orphaned, is sent SIGTERM, gives its lease back and
# says in one line that the JVM is gone. This script ends after it (30 s at most), so that whoever starts
# the job again finds the lease free and reads that line before the next start's.
running() { local state; state="$(ps -o stat= -p "$1" 2>/dev/null)" && [[ -n "$state" && "$state" != Z* ]]; }
if (( status > 128 )) && ! $terminated; then
    driver=""
    [[ -s "$pid_file" ]] && driver="$(<"$pid_file")"
    if [[ -n "$driver" ]]; then
        for _ in $(seq 300); do running "$driver" || break; sleep 0.1; done
    else
        echo "spark-submit.sh: Spark's JVM (pid $jvm) ended by signal $((status - 128)) before the job started" >&2
    fi
fi
rm -f "$pid_file"
if $terminated && (( status == 137 )); then status=130; fi  # killed before its driver began: stopped
exit "$status"
