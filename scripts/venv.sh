# shellcheck shell=bash
# Bootstrap library for the entry scripts; not meant to be run on its own.
#
# Usage (from a script in the repo):   source "<repo>/scripts/venv.sh"
#
# Makes sure python3 (>= 3.10) and Java (>= 17, which Spark needs) are there, creates
# <repo>/.venv if it is missing, and installs requirements.txt into it whenever the file's
# sha256 differs from the stamp kept in .venv (first run installs, later runs cost nothing,
# a changed pin reinstalls). Exits the calling script with status 1 and a message on stderr
# when something is missing. All output goes to stderr so a job's stdout stays clean.
#
# Sets: KL_ROOT (repo root), KL_VENV (.venv), KL_PY (the venv's python).

KL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KL_VENV="$KL_ROOT/.venv"
KL_PY="$KL_VENV/bin/python"
KL_REQUIREMENTS="$KL_ROOT/requirements.txt"
KL_STAMP="$KL_VENV/.requirements.sha256"

kl_die() {
    printf 'kraftlake: %s\n' "$*" >&2
    exit 1
}

kl_check_python() {
    local version
    command -v python3 >/dev/null 2>&1 \
        || kl_die "python3 not found on PATH: install Python 3.10 or newer."
    version="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" \
        || kl_die "python3 ($(command -v python3)) does not run: install Python 3.10 or newer."
    python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
        || kl_die "python3 is $version; Python 3.10 or newer is required."
}

# Spark's launcher runs $JAVA_HOME/bin/java when JAVA_HOME is set, else java from PATH: check that one.
kl_check_java() {
    local java="java" out major
    if [[ -n "${JAVA_HOME:-}" ]]; then
        java="$JAVA_HOME/bin/java"
    fi
    local hint='Java 17+ is required for Spark: install it, e.g. `apt-get install openjdk-17-jre-headless`'
    if ! out="$("$java" -version 2>&1)"; then
        kl_die "$hint (cannot run '$java -version')."
    fi
    # First line looks like: openjdk version "17.0.15" 2025-04-15  /  java version "1.8.0_402"
    major="$(printf '%s\n' "$out" | sed -n 's/.*version "\([0-9][0-9]*\)\(\.\([0-9][0-9]*\)\)\{0,1\}.*/\1 \3/p' | head -n 1)"
    if [[ -z "$major" ]]; then
        kl_die "$hint (cannot read the version from '$java -version')."
    fi
    set -- $major
    if [[ "$1" == "1" ]]; then  # pre-9 numbering: 1.8 is Java 8
        major="${2:-0}"
    else
        major="$1"
    fi
    if (( major < 17 )); then
        kl_die "$hint (found Java $major at '$java')."
    fi
}

kl_requirements_hash() {
    python3 -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' \
        "$KL_REQUIREMENTS"
}

# Runs under the lock (see kl_ensure_venv): two scripts started at once must not both run pip.
kl_install_locked() {
    local want have="" log rc
    if [[ ! -x "$KL_PY" ]] || ! "$KL_PY" -c '' >/dev/null 2>&1; then
        printf 'kraftlake: creating %s\n' "$KL_VENV" >&2
        # --clear: a .venv left by another python (or a moved checkout) is rebuilt, not patched.
        python3 -m venv --clear "$KL_VENV" >&2 \
            || kl_die "could not create $KL_VENV with 'python3 -m venv' (on Debian/Ubuntu: apt-get install python3-venv)."
    fi
    want="$(kl_requirements_hash)" || kl_die "cannot read $KL_REQUIREMENTS"
    [[ -f "$KL_STAMP" ]] && have="$(cat "$KL_STAMP")"
    if [[ "$want" == "$have" ]]; then
        return 0
    fi
    printf 'kraftlake: installing requirements.txt into .venv (first run or changed pins; takes a few minutes)\n' >&2
    log="$KL_VENV/pip-install.log"
    "$KL_PY" -m pip install --disable-pip-version-check -r "$KL_REQUIREMENTS" 2>&1 | tee "$log" >&2
    rc="${PIPESTATUS[0]}"
    if [[ "$rc" != 0 ]]; then
        {
            printf '\nkraftlake: pip could not install requirements.txt into .venv (exit %s). What failed:\n' "$rc"
            grep -E '^(ERROR|error):|No matching distribution|Could not find a version|Failed to build|Failed building' "$log" \
                | awk '!seen[$0]++ { print "  " $0 }' || true
            printf 'Full pip output: %s\n' "$log"
        } >&2
        exit 1
    fi
    printf '%s\n' "$want" >"$KL_STAMP"
}

kl_ensure_venv() {
    [[ -f "$KL_REQUIREMENTS" ]] || kl_die "missing $KL_REQUIREMENTS"
    if command -v flock >/dev/null 2>&1; then
        # The lock lives outside .venv because `venv --clear` empties that directory.
        # A subshell holds it so the descriptor is not inherited by the job we exec later.
        mkdir -p "$KL_ROOT/build" || kl_die "cannot create $KL_ROOT/build"
        ( flock 9 && kl_install_locked ) 9>"$KL_ROOT/build/.venv-install.lock" || exit 1
    else
        kl_install_locked
    fi
}

kl_check_python
kl_check_java
kl_ensure_venv
