# shellcheck shell=bash
# Bootstrap library for the entry scripts; not meant to be run on its own.
#
# Usage (from a script in the repo):   source "<repo>/scripts/venv.sh" REQUIREMENTS_FILE
#   spark-submit.sh: the product's requirements.txt; run-tests.sh: requirements-test.txt,
#   which adds the test-only packages (pytest, hypothesis, chispa, moto[server]) to the product's.
#
# Makes sure python3 (>= 3.10) is there (kl_check_java, for the callers that start Spark: Java >= 17),
# creates <repo>/.venv if it is missing, and installs the requirements file into it whenever its sha256 (with
# the files it includes with -r) differs from the file's stamp kept in .venv (first run installs, later
# runs cost nothing, a changed pin reinstalls). pip's output goes to .venv/pip-install.log; one line
# says what is being installed, and a failure shows what failed and the log's tail. Exits the calling
# script with status 1 and a message on stderr when something is missing. All output goes to stderr so a
# job's stdout stays clean.
#
# Sets: KL_ROOT (repo root), KL_VENV (.venv), KL_PY (the venv's python).

KL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KL_VENV="$KL_ROOT/.venv"
KL_PY="$KL_VENV/bin/python"
# named explicitly: a `source` without arguments would see the calling script's own
KL_REQUIREMENTS="$KL_ROOT/${1:?scripts/venv.sh: name the requirements file to install}"

kl_die() {
    printf 'kraftlake: %s\n' "$*" >&2
    exit 1
}

kl_check_python() {
    local version
    command -v python3 >/dev/null 2>&1 \
        || kl_die "python3 not found on PATH: install Python 3.10 or newer."
    version="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2]); sys.exit(sys.version_info < (3, 10))' 2>/dev/null)" \
        && return 0
    [[ -n "$version" ]] || kl_die "python3 ($(command -v python3)) does not run: install Python 3.10 or newer."
    kl_die "python3 is $version; Python 3.10 or newer is required."
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

# The requirements file and every file it includes with `-r`, one path per line (--files), or the sha256 of
# them all: a changed pin in any of them changes what the file installs.
kl_requirements() {
    python3 - "$@" <<'PY'
import hashlib, os, sys
def walk(path, seen):
    if path not in seen:
        seen.append(path)
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                words = line.split("#", 1)[0].split()
                if len(words) == 2 and words[0] in ("-r", "--requirement"):
                    walk(os.path.join(os.path.dirname(path), words[1]), seen)
    return seen
files = walk(sys.argv[-1], [])
if sys.argv[1] == "--files":
    print("\n".join(files))
else:
    print(hashlib.sha256(b"".join(open(p, "rb").read() for p in files)).hexdigest())
PY
}

kl_stamp() {
    printf '%s/.%s.sha256' "$KL_VENV" "$(basename "$1")"
}

# Runs under the lock (see kl_ensure_venv): two scripts started at once must not both run pip.
kl_install_locked() {
    local want have="" log rc file names
    if [[ ! -x "$KL_PY" ]] || ! "$KL_PY" -c '' >/dev/null 2>&1; then
        printf 'kraftlake: creating %s\n' "$KL_VENV" >&2
        # --clear: a .venv left by another python (or a moved checkout) is rebuilt, not patched.
        python3 -m venv --clear "$KL_VENV" >&2 \
            || kl_die "could not create $KL_VENV with 'python3 -m venv' (on Debian/Ubuntu: apt-get install python3-venv)."
    fi
    want="$(kl_requirements "$KL_REQUIREMENTS")" || kl_die "cannot read $KL_REQUIREMENTS"
    [[ -f "$(kl_stamp "$KL_REQUIREMENTS")" ]] && have="$(cat "$(kl_stamp "$KL_REQUIREMENTS")")"
    if [[ "$want" == "$have" ]]; then
        return 0
    fi
    # what is being installed, in one line: the file's own packages, then the files it includes
    names="$(sed -n 's/^\([A-Za-z0-9][A-Za-z0-9._-]*\).*/\1/p' "$KL_REQUIREMENTS" | paste -sd ' ' -)"
    while IFS= read -r file; do
        [[ "$file" != "$KL_REQUIREMENTS" ]] && names="$names + $(basename "$file")"
    done < <(kl_requirements --files "$KL_REQUIREMENTS")
    log="$KL_VENV/pip-install.log"
    printf 'kraftlake: installing %s into .venv (%s; first run or changed pins, takes a few minutes; pip output in %s)\n' \
        "$(basename "$KL_REQUIREMENTS")" "$names" "${log#"$KL_ROOT"/}" >&2
    rc=0
    "$KL_PY" -m pip install --disable-pip-version-check -r "$KL_REQUIREMENTS" >"$log" 2>&1 || rc=$?
    if [[ "$rc" != 0 ]]; then
        {
            printf 'kraftlake: pip could not install %s into .venv (exit %s); the end of its output (all of it in %s):\n' \
                "$(basename "$KL_REQUIREMENTS")" "$rc" "$log"
            tail -n 15 "$log" | sed 's/^/  /'
        } >&2
        exit 1
    fi
    # what a -r pulls in is installed too: its own stamp says so, unless it changed in between
    while IFS= read -r file; do
        kl_requirements "$file" >"$(kl_stamp "$file")"
    done < <(kl_requirements --files "$KL_REQUIREMENTS")
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
kl_ensure_venv
# kl_check_java: called by the scripts before they start Spark (a job that needs none runs without Java)
