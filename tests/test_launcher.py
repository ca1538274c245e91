"""``spark-submit.sh`` and ``kraftlake.cli.launcher``, as a user meets them: data on stdout and messages on
stderr, also when Spark's launcher starts the driver; jobs that need no Spark start no JVM; a user's mistake
is one line and an exit code; a SIGTERM to the launcher leaves no process behind and nothing commits after.

The jobs run as processes, started as the docs say: ``./spark-submit.sh jobs/X.py`` and the venv's
``python jobs/X.py`` without PYTHONPATH. Every process started here is stopped by its own id (its group's,
each started in a session of its own).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from deltalake.exceptions import TableNotFoundError

from kraftlake.cli.launcher import (FAILED, INTERRUPTED, USAGE, UserError, _ending, error_line, is_jvm_lost, needs_spark,
                                    run_job)
from kraftlake.metadata.config import ConfigError
from kraftlake.sim.sample import write_sample
from kraftlake.storage import DeltaRsTables
from kraftlake.storage.ingest import ingest_source
from servers import start, stop, wait_for
from streaming_helpers import REPO_ROOT, generate_log
from test_follow import Node, numbered
from test_invariants import WHAT_IF

SHUTDOWN = "single-broker-shutdown/__cluster_metadata-0"
# Through spark-submit even when the job needs no Spark, so that Spark's launcher starts the driver.
THROUGH_SPARK = {"KRAFTLAKE_SPARK_SUBMIT": "always"}


def job(name: str) -> str:
    return f"jobs/{name}.py"


def launch(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``./spark-submit.sh args`` as a user runs it; PYTHONPATH is the launcher's business."""
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KRAFTLAKE_SPARK_SUBMIT")}
    return subprocess.run(["./spark-submit.sh", *args], cwd=REPO_ROOT, env={**environment, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def plain(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The venv's ``python jobs/X.py args`` without PYTHONPATH, as docs/jobs/ingest.md shows it."""
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, *args], cwd=REPO_ROOT, env={**environment, **(env or {})},
                          capture_output=True, text=True, timeout=600)


def json_lines(stdout: str) -> list[dict]:
    """Every line of stdout parsed as JSON: a message among the data fails here."""
    return [json.loads(line) for line in stdout.splitlines()]


# --- data on stdout, messages on stderr ----------------------------------------------------------------

@pytest.fixture
def truncated_segment(fixtures_dir: Path, tmp_path: Path) -> Path:
    """The shutdown log's segment cut 5 bytes into a batch header: everything before it, then damage."""
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes((fixtures_dir / SHUTDOWN / segment.name).read_bytes()[:200_000])
    return segment


@pytest.mark.parametrize("through_spark", [False, True], ids=["without-jvm", "through-spark-submit"])
def test_dump_of_a_truncated_segment_keeps_its_json_apart_from_the_damage(truncated_segment: Path,
                                                                            through_spark: bool) -> None:
    # --verbose is spark-submit's own option: what it prints proves Spark's launcher ran the driver
    done = launch("--verbose", job("dump"), str(truncated_segment), env=THROUGH_SPARK if through_spark else None)
    assert done.returncode == 0, done.stderr[-3000:]
    records = json_lines(done.stdout)
    assert len(records) == 2772 and [r["offset"] for r in records] == list(range(2772))
    assert f"dump: rejected: {truncated_segment} at byte 199995: CORRUPT_MESSAGE: truncated" in done.stderr
    assert "dump: 1 damaged part(s) skipped" in done.stderr
    assert ("Parsed arguments:" in done.stderr) == through_spark
    if not through_spark:
        assert "spark-submit.sh: jobs/dump.py needs no Spark" in done.stderr


def test_check_json_through_spark_submit_has_the_violations_on_stdout_and_the_summary_on_stderr(
        fixtures_dir: Path, tmp_path: Path) -> None:
    tables = DeltaRsTables(str(tmp_path / "w"))
    ingest_source(tables, str(fixtures_dir / SHUTDOWN))
    what_if = tmp_path / "what-if.jsonl"
    what_if.write_text("".join(json.dumps(line) + "\n" for line in WHAT_IF))
    ingest_source(tables, str(what_if))
    done = launch("--verbose", job("check"), "--warehouse", tables.root, "--format", "json", env=THROUGH_SPARK)
    assert done.returncode == FAILED, done.stderr[-3000:]
    assert [(v["offset"], v["kind"]) for v in json_lines(done.stdout)] == [
        (4929, "INELIGIBLE_LEADER_ELECTED"), (4931, "INELIGIBLE_REPLICA_ADDED_TO_ISR"),
        (4932, "UNREGISTERED_LEADER_ELECTED"), (4932, "LEADER_NOT_IN_ISR")]
    assert "4,933 events checked (112 partition changes), 4 violations\n" in done.stderr
    assert "Parsed arguments:" in done.stderr


# --- jobs that need no Spark start none ---------------------------------------------------------------

def test_which_jobs_need_spark() -> None:
    assert [j for j in ("dump", "check", "report", "quorum", "ingest", "simulate") if needs_spark(j, [])] == []
    assert all(needs_spark(j, ["--warehouse", "w"]) for j in ("controller", "sql", "quickstart", "reassign", "bench"))
    assert needs_spark("my_own_job", []), "a job this library does not know may well start Spark"
    assert not needs_spark("controller", ["--help"]) and not needs_spark("sql", ["-h"])
    assert needs_spark("sql", ["--warehouse", "w", "--", "--help"]), "after --, --help is a query, not the option"


def test_ingest_needs_spark_when_its_settings_say_its_decoders_are_sparks(tmp_path: Path) -> None:
    spark = "kraftlake.ingest.decoders=spark"
    (tmp_path / "spark.properties").write_text(spark + "\n")
    assert needs_spark("ingest", ["--warehouse", "w", "--override", spark, "log"])
    assert needs_spark("ingest", ["--conf-file", str(tmp_path / "spark.properties"), "log"])
    assert not needs_spark("ingest", ["--conf-file", str(tmp_path / "spark.properties"), "--override",
                                      "kraftlake.ingest.decoders=local", "log"]), "--override wins"
    assert not needs_spark("ingest", ["--override", spark, "--follow", "dir"]), "--follow decodes in its own process"
    assert not needs_spark("ingest", ["--conf-file", str(tmp_path / "missing.properties"), "log"]), \
        "a setting that cannot be read is the job's to report, without a JVM"


NO_PYSPARK = '''import sys
class NoSpark:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "pyspark":
            raise ImportError(f"{name} imported by a job that was to run without Spark")
sys.meta_path.insert(0, NoSpark())
'''


def test_the_jobs_that_need_no_spark_run_without_pyspark_or_a_jvm(fixtures_dir: Path, tmp_path: Path) -> None:
    """Each runs through spark-submit.sh with pyspark made unimportable: one that still started a session
    would fail (and one that the launcher sent through spark-submit would not start at all)."""
    (tmp_path / "blocker").mkdir()
    (tmp_path / "blocker" / "sitecustomize.py").write_text(NO_PYSPARK)
    warehouse, quorum = str(tmp_path / "w"), str(tmp_path / "quorum")
    log = fixtures_dir / SHUTDOWN
    runs = {
        "dump": [str(log)],
        "ingest": ["--warehouse", warehouse, str(log)],
        "check": ["--warehouse", warehouse],
        "quorum": ["--warehouse", warehouse, "describe", "--status", "--format", "json"],
        "report": ["--warehouse", warehouse, "--out", str(tmp_path / "r.html")],
        "simulate": ["--warehouse", quorum, "--quorum", "--duration-ms", "2000"],
        "controller": ["--help"],
    }
    done = {}
    for name, args in runs.items():
        done[name] = launch(job(name), *args, env={"PYTHONPATH": str(tmp_path / "blocker")})
        # the report refuses a log the controller (which needs Spark) has not replayed: still without Spark
        expected = USAGE if name == "report" else 0
        assert done[name].returncode == expected, f"{name}: {done[name].stderr[-3000:]}"
        assert "Traceback" not in done[name].stderr, f"{name}: {done[name].stderr[-3000:]}"
    assert len(json_lines(done["dump"].stdout)) == 4929
    assert DeltaRsTables(warehouse).max_value("metadata_log", "offset") == 4928
    assert json_lines(done["quorum"].stdout)[0]["LeaderId"] == 1
    assert "4,929 events checked" in done["check"].stdout and "usage: controller.py" in done["controller"].stdout


# --- a user's mistake: one line, an exit code ----------------------------------------------------------

MISTAKES = [
    # (job and its arguments, {w} the warehouse; exit code; all that stderr says, {repo} the repository)
    ("ingest --warehouse /etc/passwd/w README.md", USAGE,
     "ingest: cannot use the warehouse /etc/passwd/w: /etc/passwd is not a directory"),
    ("ingest --warehouse {w} README.md", USAGE,
     "ingest: {repo}/README.md: nothing could be read: INVALID_RECORD: not a Kafka log segment, snapshot, partition "
     "directory, JSON lines or Avro file; the rejection is in {w}/rejected"),
    ("ingest --warehouse {w} no-such-log", USAGE, "ingest: no-such-log: no such file or directory"),
    # said before the Spark session the setting asks for is started, and before the first source is read
    ("ingest --warehouse {w} --override kraftlake.ingest.decoders=spark no-such-log", USAGE,
     "ingest: no-such-log: no such file or directory"),
    ("ingest --warehouse {w} README.md no-such-log", USAGE, "ingest: no-such-log: no such file or directory"),
    ("ingest --warehouse {w} --follow no-such-dir", USAGE, "ingest: --follow no-such-dir: not a directory"),
    ("ingest --warehouse {w} --override kraftlake.ingest.batch.records=many README.md", USAGE,
     "ingest: kraftlake.ingest.batch.records='many' (from --override): expected an integer"),
    ("dump README.md", USAGE, "dump: README.md: nothing could be read: INVALID_RECORD: not a Kafka log segment, "
                              "snapshot, partition directory, JSON lines or Avro file"),
    ("dump lib", USAGE, "dump: {repo}/lib: no log segments (*.log) or snapshots (*.checkpoint)"),
    ("check --warehouse {w}", USAGE, "check: no metadata_log table in {w}: ingest a log first (jobs/ingest.py)"),
    ("check --warehouse {w} --override broken", USAGE, "check: --override expects KEY=VALUE, got 'broken'"),
    ("quorum --warehouse {w} describe --status", USAGE,
     "quorum: no metadata_log in {w}: ingest a log first (jobs/ingest.py)"),
    ("report --warehouse {w} --out {w}.html --from yesterday", USAGE,
     "report: 'yesterday' is neither an ISO time (2026-01-30T17:23:54Z) nor epoch milliseconds"),
    ("controller --warehouse {w} --once", USAGE, "controller: no metadata_log in {w}: ingest a log first (jobs/ingest.py)"),
    ("controller --warehouse {w} --once --shards 0", USAGE, "controller: --shards 0: a controller has at least one shard"),
    ("reassign --warehouse {w} --verify no-such-plan.json", USAGE, "reassign: no-such-plan.json: No such file or directory"),
    ("simulate --warehouse {w} --mix crash=lots", USAGE, "simulate: mix: 'crash=lots' is not NAME=WEIGHT with NAME one "
                                                         "of crash, rolling_restart, preferred_election, reassign, "
                                                         "cancel_reassignment, delete_topic, create_topic, "
                                                         "create_partitions, list_reassignments, unclean_election, "
                                                         "unregister and WEIGHT a number >= 0"),
]


@pytest.mark.parametrize("command,code,says", MISTAKES, ids=[m[0].replace("{w}", "W") for m in MISTAKES])
def test_a_mistake_is_one_line_and_an_exit_code(tmp_path: Path, command: str, code: int, says: str) -> None:
    name, *args = command.format(w=tmp_path / "w").split()
    done = plain(job(name), *args)
    assert (done.returncode, done.stderr) == (code, says.format(w=tmp_path / "w", repo=REPO_ROOT) + "\n")


def test_a_source_that_is_not_a_log_fails_again_when_ingested_again(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "w")
    first, again = (plain(job("ingest"), "--warehouse", warehouse, "README.md") for _ in range(2))
    assert first.returncode == again.returncode == USAGE
    assert "already ingested, nothing added" in again.stdout
    assert again.stderr == first.stderr and "nothing could be read: INVALID_RECORD" in again.stderr
    assert DeltaRsTables(warehouse).read_arrow("rejected").num_rows == 1  # kept once, with its location


def test_a_warehouse_on_a_read_only_file_system(tmp_path: Path) -> None:
    """A tmpfs mounted read-only in a mount namespace of the job's own (the host sees no mount)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to mount a read-only file system")
    mount = tmp_path / "ro"
    mount.mkdir()
    script = (f"mount -t tmpfs -o ro none {mount} || exit 99; "
              f"exec {sys.executable} {job('ingest')} --warehouse {mount}/w README.md")
    done = subprocess.run(["unshare", "--map-root-user", "--mount", "sh", "-c", script], cwd=REPO_ROOT,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                          capture_output=True, text=True, timeout=300)
    if done.returncode == 99 or "unshare failed" in done.stderr or "Operation not permitted" in done.stderr:
        pytest.skip(f"this machine does not allow a mount namespace: {done.stderr.strip()}")
    assert (done.returncode, done.stderr) == (
        USAGE, f"ingest: cannot write the warehouse {mount}/w: Read-only file system\n")


def test_a_damaged_data_file_of_the_log_stops_the_controller_in_one_line(fixtures_dir: Path, tmp_path: Path) -> None:
    """A metadata_log data file cut short under the warehouse: the job's line named the failed query, then
    carried the library's Python traceback, the JVM's and the query's description (39 lines)."""
    warehouse = tmp_path / "w"
    ingest_source(DeltaRsTables(str(warehouse)), str(fixtures_dir / SHUTDOWN))
    [data] = sorted((warehouse / "metadata_log").glob("*.parquet"))
    whole = data.read_bytes()
    data.write_bytes(whole[:len(whole) // 2] + whole[-8:])  # the footer's length and magic, no footer
    done = launch(job("controller"), "--warehouse", str(warehouse), "--once",
                  "--override", f"kraftlake.checkpoints={tmp_path / 'checkpoints'}")
    said = [line for line in done.stderr.splitlines() if not line.startswith("WARNING: Using incubator modules")]
    assert done.returncode == FAILED and len(said) == 1, done.stderr[-3000:]
    assert said[0].startswith("controller: the controller query failed: ") and data.name in said[0], said


def test_a_warehouse_the_user_may_not_write() -> None:
    """As root, the job runs as nobody (root may write anywhere); else in a folder without write permission.
    The folder is outside pytest's own, which only its owner may enter."""
    closed = Path(tempfile.mkdtemp(prefix="kraftlake-closed-"))
    command = [sys.executable, job("ingest"), "--warehouse", str(closed / "w"), str(REPO_ROOT / "README.md")]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv(1) to run the job as another user")
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
        closed.chmod(0o755)
    else:
        closed.chmod(0o555)
    try:
        done = subprocess.run(command, cwd=REPO_ROOT, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                              capture_output=True, text=True, timeout=300)
    finally:
        closed.chmod(0o755)
        shutil.rmtree(closed)
    assert (done.returncode, done.stderr) == (USAGE, f"ingest: cannot write the warehouse {closed}/w: Permission denied\n")


def test_an_object_store_warehouse_that_cannot_be_used(s3_server, tmp_path: Path) -> None:  # noqa: ANN001
    endpoint = [f"--override=kraftlake.storage.{k}={v}" for k, v in s3_server.storage_options().items()
                if k != "aws_endpoint_url"]
    cases = [
        ([f"--override=kraftlake.storage.aws_endpoint_url={s3_server.endpoint}", *endpoint],
         "NoSuchBucket: The specified bucket does not exist"),
        # nothing listens there; one retry, not object_store's 10 over about a minute of backoff
        (["--override=kraftlake.storage.aws_endpoint_url=http://127.0.0.1:9", "--override=kraftlake.storage.max_retries=1",
          *endpoint], "Failed to connect to 127.0.0.1:9"),
        ([f"--override=kraftlake.storage.aws_endpoint_url={s3_server.endpoint}",
          "--override=kraftlake.storage.aws_allow_http=true", "--override=kraftlake.storage.aws_region=us-east-1"],
         "no credentials found: set kraftlake.storage.aws_access_key_id and aws_secret_access_key"),
    ]
    for options, says in cases:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "PYTHONPATH"}
        done = subprocess.run([sys.executable, job("ingest"), "--warehouse", "s3://no-such-bucket/w", "README.md",
                               *options], cwd=REPO_ROOT, env=environment, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == USAGE and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("ingest: cannot use the warehouse s3://no-such-bucket/w: ") and says in done.stderr, \
            done.stderr


def test_a_closed_pipe_on_stdout_is_not_an_error(fixtures_dir: Path) -> None:
    done = subprocess.run(f"{sys.executable} {job('dump')} {fixtures_dir / SHUTDOWN} | head -n 1", shell=True,
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert json.loads(done.stdout)["offset"] == 0 and done.stderr == ""


def test_run_job_says_each_kind_of_failure_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    def failing(exc: BaseException):  # noqa: ANN202
        def main(argv: list[str] | None) -> int:
            raise exc
        return main

    outcomes = [
        (UserError("--from: not a time"), USAGE, "job: --from: not a time"),
        (ConfigError("kraftlake.shards='x' (from --override): expected an integer"), USAGE,
         "job: kraftlake.shards='x' (from --override): expected an integer"),
        (FileNotFoundError(errno.ENOENT, "No such file or directory", "/w/metadata_log"), FAILED,
         "job: /w/metadata_log: No such file or directory"),
        (TableNotFoundError('Could not create local directory: /proc/w/t\nError: Os { code: 2, kind: NotFound, '
                            'message: "No such file or directory" }'), FAILED,
         "job: Could not create local directory: /proc/w/t: No such file or directory"),
        (KeyboardInterrupt(), INTERRUPTED, "job: interrupted"),
    ]
    for exc, code, says in outcomes:
        assert run_job("job", failing(exc)) == code
        assert capsys.readouterr().err == says + "\n"
    with pytest.raises(ZeroDivisionError):  # a bug keeps its traceback
        run_job("job", failing(ZeroDivisionError("division by zero")))


# A job whose stop lands in a finalizer (py4j drops its Java objects from finalizers): Python swallows what a
# finalizer raises, so the SIGTERM raised there would be lost and the job would run on.
STOP_IN_A_FINALIZER = """
import os, signal, sys, time
from kraftlake.cli.launcher import run_job

class Dropped:
    def __del__(self):
        os.kill(os.getpid(), signal.SIG)
        for _ in range(100_000):  # (the signal's handler runs here, inside the finalizer)
            pass

def main(argv):
    Dropped()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.01)
    print("ran on", file=sys.stderr)
    return 0

sys.exit(run_job("job", main))
"""


@pytest.mark.parametrize("sig, says", [("SIGTERM", "job: stopped (SIGTERM); start again to continue\n"),
                                       ("SIGINT", "job: interrupted\n")])
def test_a_stop_that_lands_in_a_finalizer_still_stops_the_job(sig: str, says: str) -> None:
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "lib")}
    done = subprocess.run([sys.executable, "-c", STOP_IN_A_FINALIZER.replace("signal.SIG)", f"signal.{sig})")],
                          env=environment, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (INTERRUPTED, says)


def test_an_object_store_error_in_one_line() -> None:
    s3 = OSError("Generic S3 error\n          \x1b[31m↳\x1b[0m Error performing list request\n"
                 "           \x1b[31m↳\x1b[0m 404 Not Found\n             \x1b[31m↳\x1b[0m <?xml version=\"1.0\"?>\n"
                 "<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>")
    assert error_line(s3) == "Generic S3 error: NoSuchBucket: The specified bucket does not exist"
    refused = OSError("Generic S3 error\n  \x1b[31m↳\x1b[0m tcp connect error\n  \x1b[31m↳\x1b[0m Connection refused")
    assert error_line(refused) == "Generic S3 error: tcp connect error: Connection refused"
    damaged = TableNotFoundError("Kernel error: Json error: Encountered unexpected 'g' whilst parsing object\n"
                                 "   0: <unknown>\n  12: start_thread\n             at ./nptl/pthread_create.c:442:8\n")
    assert error_line(damaged) == "Kernel error: Json error: Encountered unexpected 'g' whilst parsing object"


# --- the driver under Spark's launcher: where its stderr goes, when its launcher is gone ---------------

def run_driver(env: dict[str, str]) -> subprocess.CompletedProcess:
    """A job's process as Spark's launcher starts it, told about a launcher by ``env``: it says something on
    stderr and exits."""
    code = ("import sys\nfrom kraftlake.cli.launcher import run_job\n"
            "sys.exit(run_job('job', lambda argv: print('to stderr', file=sys.stderr) or 0))\n")
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "lib"), **env}
    return subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=60)


def test_a_driver_whose_stderr_fifo_has_no_reader_keeps_its_stderr(tmp_path: Path) -> None:
    """Nobody reads the FIFO (its reader died, or it is gone): opening it must neither wait nor lose the
    message."""
    fifo = tmp_path / "stderr"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path / "gone"):
        done = run_driver({"KRAFTLAKE_STDERR_FIFO": str(path), "KRAFTLAKE_PROGRESS_TERMINAL": "1"})
        assert (done.returncode, done.stderr) == (0, "to stderr\n")


def test_a_driver_whose_launcher_is_already_gone_does_not_start(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    done = run_driver({"KRAFTLAKE_LAUNCHER_PID": str(gone.pid)})
    assert (done.returncode, done.stderr) == (1, f"job: the launcher (pid {gone.pid}) is gone; not starting\n")


def test_a_driver_whose_jvm_dies_says_so_in_one_line(tmp_path: Path) -> None:
    """A JVM killed under a running driver (kill -9, the OOM killer): the kernel's SIGTERM to the orphaned
    driver is not the user's stop, and the line says what happened instead of "stopped (SIGTERM)"."""
    err, rc = tmp_path / "err", tmp_path / "rc"
    driver = ("import sys, time\nfrom kraftlake.cli.launcher import run_job\n"
              "def main(argv):\n    print('up', file=sys.stderr, flush=True)\n    time.sleep(60)\n    return 0\n"
              f"code = run_job('job', main)\nopen({str(rc)!r}, 'w').write(str(code))\n")
    jvm = ("import subprocess, sys\n"  # stands for the JVM: the driver's parent, which starts it and waits
           f"child = subprocess.Popen([sys.executable, '-c', {driver!r}], stderr=open({str(err)!r}, 'w'))\n"
           "print(child.pid, flush=True)\nchild.wait()\n")
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "lib"), "KRAFTLAKE_LAUNCHER_PID": str(os.getpid())}
    parent = subprocess.Popen([sys.executable, "-c", jvm], env=environment, stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert wait_for(lambda: err.read_text() == "up\n", 30), err.read_text()
    finally:
        parent.kill()
        parent.wait()
    assert wait_for(lambda: rc.exists() and rc.read_text() != "", 30), err.read_text()
    assert (rc.read_text(), err.read_text()) == (
        str(FAILED), f"up\njob: Spark's JVM (pid {parent.pid}) is gone (killed, or crashed: see its last messages "
                     "above); start again to continue\n")
    assert wait_for(lambda: not still_running({(child, processes().get(child, (0, "", ""))[1])}), 30)


def test_a_lost_connection_to_the_jvm_is_told_from_other_connection_errors() -> None:
    from py4j.protocol import Py4JNetworkError

    def raised(filename: str) -> BaseException:
        try:
            exec(compile("raise ConnectionRefusedError(111, 'Connection refused')", filename, "exec"))
        except ConnectionRefusedError as exc:
            return exc
        raise AssertionError("nothing raised")

    assert is_jvm_lost(Py4JNetworkError("Answer from Java side is empty"))
    assert is_jvm_lost(raised(os.path.join(os.sep, "venv", "py4j", "clientserver.py")))
    assert not is_jvm_lost(raised(os.path.join(os.sep, "venv", "deltalake", "table.py")))
    assert not is_jvm_lost(RuntimeError("Connection refused"))


# --- SIGTERM to the launcher ---------------------------------------------------------------------------

def processes() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, start time, state) of every process, from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        table[int(entry.name)] = (int(fields[1]), fields[19], fields[0])
    return table


def descendants(pid: int) -> set[tuple[int, str]]:
    """(pid, start time) of every process under ``pid``: a pid reused later is not the same process."""
    table = processes()
    found: set[tuple[int, str]] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, started, _) in table.items():
            if ppid == parent and (child, started) not in found:
                found.add((child, started))
                todo.append(child)
    return found


def still_running(started: set[tuple[int, str]]) -> set[tuple[int, str]]:
    table = processes()
    return {(pid, when) for pid, when in started
            if pid in table and table[pid][1] == when and table[pid][2] != "Z"}


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def sigterm_the_launcher(launcher: subprocess.Popen, log: Path, driver: str) -> set[tuple[int, str]]:
    """SIGTERM the launcher's own pid (not its group), wait for it; what it had started, still running."""
    started = descendants(launcher.pid) | {(launcher.pid, processes()[launcher.pid][1])}
    assert any(driver in cmdline(pid) for pid, _ in started), f"no {driver} among {started}:\n{log.read_text()}"
    os.kill(launcher.pid, signal.SIGTERM)
    launcher.wait(120)
    wait_for(lambda: not still_running(started), 60)
    return still_running(started)


def leftovers(marker: str) -> list[str]:
    return [cmdline(pid) for pid in processes() if marker in cmdline(pid) and pid != os.getpid()]


FOLLOW_WAYS = {
    "python-jobs-ingest": ([sys.executable], {}),  # the documented command, no PYTHONPATH
    "spark-submit": (["./spark-submit.sh"], {}),  # runs it on the venv's python: no JVM
    "spark-submit-through-the-jvm": (["./spark-submit.sh"], THROUGH_SPARK),  # the driver is the JVM's child
}


@pytest.mark.parametrize("way", sorted(FOLLOW_WAYS))
def test_sigterm_to_the_launcher_stops_the_follower_and_nothing_commits_after(tmp_path: Path, way: str) -> None:
    prefix, extra = FOLLOW_WAYS[way]
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    node = Node(directory, numbered(generate_log(seed=7, size=60).events))
    node.append(20)
    warehouse = tmp_path / "w"
    log = tmp_path / "follow.log"
    command = [*prefix, job("ingest"), "--warehouse", str(warehouse), "--follow", str(directory),
               "--override", "kraftlake.ingest.follow.poll.ms=100"]
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KRAFTLAKE_SPARK_SUBMIT")}
    launcher = start(command, log, {**environment, **extra}, cwd=REPO_ROOT)
    tables = DeltaRsTables(str(warehouse))
    try:
        assert wait_for(lambda: tables.max_value("metadata_log", "offset") == 19 or launcher.poll() is not None, 180), \
            log.read_text()[-3000:]
        assert launcher.poll() is None, log.read_text()[-3000:]
        left = sigterm_the_launcher(launcher, log, "--follow")
        assert not left, f"still running after SIGTERM to the launcher: {[cmdline(p) for p, _ in left]}\n{log.read_text()[-3000:]}"
        assert leftovers(str(warehouse)) == []
        version = tables.version("metadata_log")
        node.append(20)
        time.sleep(1)  # ten of its polls: a follower left behind would have committed by now
        assert tables.version("metadata_log") == version and tables.max_value("metadata_log", "offset") == 19
        assert re.search(r"\[follow\] stopped at offset 20; start again to resume there", log.read_text()), \
            log.read_text()[-3000:]
    finally:
        stop(launcher)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc (Linux)")
def test_a_parent_killed_but_not_yet_gone_is_told_from_a_living_one() -> None:
    """The driver's parent, Spark's JVM, killed with SIGKILL, can still be its parent when the driver stops:
    a process that is dying (here a zombie, its status read before it is reaped) or gone counts as gone, a
    living one does not."""
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert not _ending(child.pid)
        child.kill()
        assert wait_for(lambda: Path(f"/proc/{child.pid}/status").read_text().split("State:")[1].split()[0] == "Z", 10)
        assert _ending(child.pid)
    finally:
        child.kill()
        child.wait()
    assert _ending(child.pid)


def test_a_jvm_killed_under_its_driver_is_said_in_one_line_once_the_driver_is_gone(tmp_path: Path) -> None:
    """kill -9 of Spark's JVM (the OOM killer, an operator): the orphaned driver stops, says that the JVM is
    gone (no traceback of pyspark's threads, no shell notice), and the launcher exits only after it, with the
    JVM's status."""
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    Node(directory, numbered(generate_log(seed=7, size=40).events)).append(20)
    warehouse, log = tmp_path / "w", tmp_path / "follow.log"
    command = ["./spark-submit.sh", job("ingest"), "--warehouse", str(warehouse), "--follow", str(directory),
               "--override", "kraftlake.ingest.follow.poll.ms=100"]
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KRAFTLAKE_SPARK_SUBMIT")}
    launcher = start(command, log, {**environment, **THROUGH_SPARK}, cwd=REPO_ROOT)
    tables = DeltaRsTables(str(warehouse))
    try:
        assert wait_for(lambda: tables.max_value("metadata_log", "offset") == 19 or launcher.poll() is not None, 180), \
            log.read_text()[-3000:]
        started = descendants(launcher.pid)
        jvm = [pid for pid, _ in started if "org.apache.spark.deploy.SparkSubmit" in cmdline(pid)]
        driver = [(pid, when) for pid, when in started
                  if "--follow" in cmdline(pid) and Path(cmdline(pid).split(" ")[0]).name.startswith("python")]
        assert len(jvm) == 1 and len(driver) == 1, [cmdline(pid) for pid, _ in started]
        os.kill(jvm[0], signal.SIGKILL)
        assert launcher.wait(60) == 128 + signal.SIGKILL
        assert not still_running(set(driver))  # the launcher waited for it
        said = (f"ingest: Spark's JVM (pid {jvm[0]}) is gone (killed, or crashed: see its last messages above); "
                "start again to continue\n")
        # the stderr FIFO's reader passes the driver's last line on after the driver has ended
        assert wait_for(lambda: log.read_text().endswith(said), 30), log.read_text()[-3000:]
        text = log.read_text()
        assert "Traceback" not in text and "Killed" not in text, text[-3000:]
    finally:
        stop(launcher)


def test_sigterm_to_the_launcher_of_a_spark_job_leaves_no_driver_behind(tmp_path: Path) -> None:
    """The continuous controller, started through spark-submit.sh: the JVM, its Python driver, the driver's
    Spark workers and the launcher's stderr reader all end; new log rows are not replayed."""
    log_dir, what_if = write_sample(tmp_path / "sample")
    warehouse = tmp_path / "w"
    tables = DeltaRsTables(str(warehouse))
    ingest_source(tables, str(log_dir))
    log = tmp_path / "controller.log"
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    launcher = start(["./spark-submit.sh", "--master", "local[1,4]", job("controller"), "--warehouse", str(warehouse),
                      "--override", "kraftlake.controller.trigger.interval.ms=200",
                      "--override", "spark.sql.shuffle.partitions=2"], log, environment, cwd=REPO_ROOT)
    try:
        watched = ("partitions", "partition_history")  # prepared one after the other as the query starts
        assert wait_for(lambda: all(map(tables.exists, watched)) or launcher.poll() is not None, 300), \
            log.read_text()[-3000:]
        assert launcher.poll() is None, log.read_text()[-3000:]
        left = sigterm_the_launcher(launcher, log, "jobs/controller.py")
        assert not left, f"still running after SIGTERM to the launcher: {[cmdline(p) for p, _ in left]}\n{log.read_text()[-3000:]}"
        assert leftovers(str(warehouse)) == []
        versions = {name: tables.version(name) for name in watched}
        ingest_source(tables, str(what_if))
        time.sleep(2)  # ten triggers: a driver left behind would have replayed the new rows by now
        assert {name: tables.version(name) for name in versions} == versions
    finally:
        stop(launcher)
