"""What every job's process does before its work and how it ends, and what ``spark-submit.sh`` asks first.

``spark-submit.sh`` asks ``python -m kraftlake.cli.launcher JOB ARGS...`` whether the job needs Spark:
the jobs that read and write only through delta-rs (``NO_SPARK``) are run by the venv's python straight
away, without the seconds a JVM costs to start, unless their settings ask for Spark (``SPARK_WHEN``).

For the others Spark's launcher starts the Python driver with its stderr merged into its stdout, which
the JVM copies to its own stdout, so a job's messages would land in the middle of its data. The launcher
therefore hands the driver a FIFO (``STDERR_FIFO``) read into the launcher's own stderr, and the JVM's pid
(``LAUNCHER_PID``). ``run_job``, which every ``jobs/X.py`` calls, points the driver's stderr at the FIFO
and has the driver sent SIGTERM when its parent, the JVM, is gone, so a SIGTERM to the launcher leaves no
driver behind (a follower stops between polls, as on its own SIGTERM). Without either variable (a plain
``python jobs/X.py``, a test calling ``main``, cluster deploy mode) nothing changes.

``run_job`` also turns a user's mistake into one line on stderr and an exit code instead of a traceback:
``USAGE`` (2) for what the job was given (options, settings, paths, a warehouse it cannot use, a source
with nothing to read), ``FAILED`` (1) for a run that failed or found what it checks for,
``INTERRUPTED`` (130) for Ctrl-C or SIGTERM. docs/README.md lists them. The SIGTERM a driver gets because
Spark's JVM was killed or crashed under it is not a user's stop: the job says that the JVM is gone,
``FAILED``.

SIGTERM (a service manager's stop, ``kill``) raises ``Terminated`` in the main thread wherever it is, so the
job unwinds as on Ctrl-C: what it holds is given back on the way (``with`` blocks: the controller's
lease) and it ends with one line and ``INTERRUPTED``. A job that waits in a loop of its own (the streaming
queries' ``supervise``, ``ingest --follow``) puts a handler of its own in place meanwhile and stops
between two steps. A second SIGTERM while the first unwinds is ignored: the unwinding is the stop.
"""

from __future__ import annotations

import argparse
import atexit
import os
import re
import signal
import sys
import threading
import time
import traceback
from typing import Callable, Sequence

from kraftlake.cli.config import add_common_arguments, config_from_args
from kraftlake.codec.files import NotRegularFile
from kraftlake.metadata.config import ConfigError
from kraftlake.metadata.progress import TERMINAL_ENV

FAILED, USAGE, INTERRUPTED = 1, 2, 130
STDERR_FIFO = "KRAFTLAKE_STDERR_FIFO"
LAUNCHER_PID = "KRAFTLAKE_LAUNCHER_PID"
DRIVER_PID_FILE = "KRAFTLAKE_DRIVER_PID_FILE"
# Jobs whose work goes through delta-rs and the pure core only: no SparkSession, so no JVM.
NO_SPARK = frozenset({"check", "dump", "ingest", "quorum", "report", "shell", "simulate"})
# ... but for these, which start a session when a setting has this value (ingest: decoders in Spark's tasks),
# unless given one of the options (ingest --follow decodes in its own process whatever the setting says).
SPARK_WHEN = {"ingest": ("kraftlake.ingest.decoders", "spark", ("--follow",))}
HELP = ("-h", "--help")
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
STOP_AGAIN_S = 0.05  # a stop swallowed in a finalizer is sent again this much later (``_stop_again``)

Main = Callable[[Sequence[str] | None], int]


class UserError(Exception):
    """A mistake in what the job was given: said in one line, exit code ``USAGE``."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: the job stops as on Ctrl-C (a KeyboardInterrupt, so no ``except Exception`` keeps it)."""


def _terminated(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated()


def _stop_again(unraisable: object) -> bool:
    """A stop raised while a finalizer ran is one Python swallows (it prints "Exception ignored in"), and the job
    would run on: py4j drops its Java objects from finalizers, so a SIGTERM landing in one while the controller
    started was lost (seen in CI). The signal is sent again to the main thread a moment later, from a thread of
    its own: by then the finalizer has returned (sent from here, it would be raised here, and swallowed again),
    and a real signal also ends a call the main thread is blocked in. True if it was such a stop."""
    exc = getattr(unraisable, "exc_value", None)
    if isinstance(exc, Terminated):
        signal.signal(signal.SIGTERM, _terminated)  # (the handler ignored further ones once it raised)
        signum = signal.SIGTERM
    elif isinstance(exc, KeyboardInterrupt):
        signum = signal.SIGINT
    else:
        return False
    again = threading.Timer(STOP_AGAIN_S, signal.pthread_kill, (threading.main_thread().ident, signum))
    again.daemon = True
    again.start()
    return True


# What reading a path the user named may raise when the path is wrong (with ValueError: not what it claims)
PATH_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, NotRegularFile)


def needs_spark(job: str, args: Sequence[str]) -> bool:
    """Whether ``jobs/<job>.py`` with ``args`` starts a SparkSession (unknown jobs are assumed to)."""
    options = list(args)
    if "--" in options:  # what follows is an argument even if it looks like an option
        options = options[:options.index("--")]
    if any(a in HELP for a in options):
        return False  # argparse prints the help and exits before anything starts
    if job in SPARK_WHEN:
        key, value, without = SPARK_WHEN[job]
        return not any(a.split("=", 1)[0] in without for a in options) and _setting(options, key) == value
    return job not in NO_SPARK


def _setting(args: Sequence[str], key: str) -> str | None:
    """``key`` as the job given ``args`` reads it (its ``--conf-file`` and ``--override`` over the defaults);
    None when they cannot be read: the job says why itself, without Spark."""
    parser = add_common_arguments(argparse.ArgumentParser(add_help=False))
    try:
        return config_from_args(parser.parse_known_args(list(args))[0]).get_str(key)
    except (ConfigError, OSError, SystemExit):
        return None


def run_job(name: str, main: Main, argv: Sequence[str] | None = None) -> int:
    """Run a job's ``main`` as the module docstring says (each ``jobs/X.py`` calls this); ``name``
    prefixes its one-line errors."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if in_main_thread else None
    unraisable_hook = sys.unraisablehook
    if in_main_thread:
        sys.unraisablehook = lambda unraisable: _stop_again(unraisable) or unraisable_hook(unraisable)
    try:
        _adopt_launcher(name)  # after: the launcher may send SIGTERM here as soon as it is adopted
        code = main(argv)
        gone = _what_went_away()  # a job that stops on SIGTERM by itself took the kernel's for a user's
        return _fail(name, gone, FAILED) if gone else code
    except (UserError, ConfigError) as exc:
        return _fail(name, str(exc), USAGE)
    except Terminated:
        gone = _what_went_away()  # the SIGTERM the kernel or the watcher sends when the JVM is gone
        if gone:
            return _fail(name, gone, FAILED)
        return _fail(name, "stopped (SIGTERM); start again to continue", INTERRUPTED)
    except KeyboardInterrupt:
        return _fail(name, "interrupted", INTERRUPTED)
    except BrokenPipeError:
        # whoever read stdout stopped (`| head`): not the job's failure; nothing more reaches it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        gone = _what_went_away() or (JVM_LOST if is_jvm_lost(exc) else None)
        if gone:  # a call into the JVM failed because it is no longer there: not the job's bug
            return _fail(name, gone, FAILED)
        if not is_storage_error(exc):
            raise  # a bug: its traceback is what helps
        return _fail(name, error_line(exc), FAILED)
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
            sys.unraisablehook = unraisable_hook


def _fail(name: str, message: str, code: int) -> int:
    print(f"{name}: {message}", file=sys.stderr, flush=True)
    return code


ANSI = re.compile(r"\x1b\[[0-9;]*m")
S3_ERROR = re.compile(r"<Code>([^<]*)</Code>\s*<Message>([^<]*)</Message>")
BACKTRACE = re.compile(r"^(\d+: |at )")  # the frames of a Rust backtrace that delta-rs appends
INSTANCE_METADATA = "169.254.169.254"  # where AWS clients ask for an instance's credentials
RUST_IO_ERROR = re.compile(r'Error: Os \{ code: \d+, kind: \w+, message: "([^"]*)" \}')


JVM_LOST = "Spark's JVM is gone (killed, or crashed: see its last messages above); start again to continue"
# Set by _die_with_parent: the driver's parent (the JVM) and spark-submit.sh's pid, as they were at the start
_WATCHED: dict[str, int] = {}


def _what_went_away() -> str | None:
    """Why the job stopped, when it is because the JVM or the launcher it was started by is gone."""
    if not _WATCHED:
        return None
    if os.getppid() != _WATCHED["jvm"] or _ending(_WATCHED["jvm"]):
        return f"Spark's JVM (pid {_WATCHED['jvm']}) is gone (killed, or crashed: see its last messages above); " \
               "start again to continue"
    if not _alive(_WATCHED["launcher"]):
        return f"its launcher, spark-submit.sh (pid {_WATCHED['launcher']}), is gone; start again to continue"
    return None


def _ending(pid: int) -> bool:
    """Whether process ``pid`` is on its way out: a zombie, or killed with SIGKILL and not yet gone. Spark's JVM
    killed so stays this driver's parent until its last thread has ended, and the kernel sends the driver
    its SIGTERM (PR_SET_PDEATHSIG) when the one thread that started it ends: on a loaded machine the driver
    can stop before its parent is gone, and took that SIGTERM for a user's. Linux only (``/proc``)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            fields = dict(line.split(":", 1) for line in handle if ":" in line)
    except FileNotFoundError:
        return os.path.isdir("/proc/self")  # gone, where there is a /proc to say so
    except OSError:
        return False
    pending = int(fields.get("ShdPnd", "0").strip() or "0", 16)
    return fields.get("State", "").strip()[:1] in ("Z", "X") or bool(pending & 1 << (signal.SIGKILL - 1))


def is_jvm_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is py4j failing to reach the JVM (a driver that started its own JVM: plain python,
    a notebook) rather than an error the JVM answered with."""
    protocol = sys.modules.get("py4j.protocol")
    if protocol is not None and isinstance(exc, protocol.Py4JNetworkError):
        return True
    if not isinstance(exc, ConnectionError):
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    return any(f"{os.sep}py4j{os.sep}" in frame.filename for frame in frames)


def is_storage_error(exc: BaseException) -> bool:
    """An error of the filesystem or an object store: an OSError, or one of delta-rs' own (which are not)."""
    delta = sys.modules.get("deltalake.exceptions")
    return isinstance(exc, OSError) or delta is not None and isinstance(exc, delta.DeltaError)


def error_line(exc: BaseException) -> str:
    """One line for an error, notably of the filesystem or an object store: delta-rs and pyarrow chain
    their causes over several lines (with colours) and S3 answers in XML; the user wants what and why."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    text = RUST_IO_ERROR.sub(r"\1", ANSI.sub("", str(exc)))
    s3 = S3_ERROR.search(text)
    causes = [c.strip(" ↳\t") for c in text.splitlines()]
    causes = [c for c in causes if c and not c.startswith("<") and not BACKTRACE.match(c)]
    line = ": ".join(causes) or type(exc).__name__
    if s3:
        line = f"{causes[0]}: {s3.group(1)}: {s3.group(2)}"
    if "credentials" in text or INSTANCE_METADATA in text:  # no keys given: the instance's were asked for
        line += (" (no credentials found: set kraftlake.storage.aws_access_key_id and aws_secret_access_key, or "
                 "AWS_* in the environment: docs/deployment.md)")
    return line


def _adopt_launcher(name: str) -> None:
    """Once per process: take over what spark-submit.sh set up for the driver (and hide it from the
    driver's own children, which are not the launcher's)."""
    launcher = os.environ.pop(LAUNCHER_PID, None)
    fifo = os.environ.pop(STDERR_FIFO, None)
    pid_file = os.environ.pop(DRIVER_PID_FILE, None)
    if launcher:
        _die_with_parent(name, int(launcher))
    if fifo:
        _stderr_into(fifo)
    if pid_file:
        _take_signals(pid_file)


def _take_signals(pid_file: str) -> None:
    """Have the launcher send SIGTERM here rather than to the JVM (``spark-submit.sh`` says why), and take
    Ctrl-C, which the JVM, started in the background, passed on ignored."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with open(pid_file, "w") as handle:
            handle.write(str(os.getpid()))
    except OSError:
        pass  # the launcher then sends SIGTERM to the JVM, as it would without a driver


def _die_with_parent(name: str, launcher: int) -> None:
    """SIGTERM to this process when its parent (the JVM) is gone: asked of the kernel (Linux), and watched
    for once a second by a thread as well (other systems, and any case the kernel's signal misses); and
    when the launcher is gone (``kill -9`` of ``spark-submit.sh``, which no longer is the JVM)."""
    parent = os.getppid()
    _WATCHED.update(jvm=parent, launcher=launcher)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the watcher alone
        pass
    try:
        os.kill(launcher, 0)
    except ProcessLookupError:  # it died before anything was asked: nobody is left to ask for the work
        raise SystemExit(f"{name}: the launcher (pid {launcher}) is gone; not starting") from None
    except PermissionError:
        pass

    def watch() -> None:
        while os.getppid() == parent and _alive(launcher):
            time.sleep(1)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="kraftlake-parent-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _stderr_into(fifo: str) -> None:
    """Point fd 2 at the launcher's FIFO. Opened without waiting: if its reader is gone, stderr stays
    where Spark put it (then without progress lines, which would otherwise go into the data)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        os.environ.pop(TERMINAL_ENV, None)
        return
    os.set_blocking(fd, True)
    sys.stderr.flush()
    os.dup2(fd, 2)
    os.close(fd)
    atexit.register(_drain_stderr)


def _drain_stderr(timeout: float = 2.0) -> None:
    """Wait (briefly) until the launcher's reader has taken everything written: the JVM, and so the
    launcher, may exit right after this process, and a caller reading the launcher's stderr from a file
    must find every line there."""
    import array
    import fcntl
    import termios

    sys.stderr.flush()
    unread = array.array("i", [0])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            fcntl.ioctl(2, termios.FIONREAD, unread)
        except OSError:
            return
        if unread[0] == 0:
            return
        time.sleep(0.005)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kraftlake.cli.launcher JOB ARGS...`` prints ``spark`` or ``python``."""
    job_name, *args = sys.argv[1:] if argv is None else argv
    print("spark" if needs_spark(job_name, args) else "python")
    return 0


if __name__ == "__main__":
    sys.exit(main())
