"""Settings for every kraftlake job, layered so an operator can change one thing without copying the rest.

Order, later wins: the shipped defaults (``conf/kraftlake.properties``, or the byte-identical
``defaults.properties`` inside the package when the library runs without its repository, e.g.
from ``build/kraftlake.zip`` or a wheel), then a site file (``--conf-file``), then
``--override KEY=VALUE`` entries, then the dedicated flags (``--warehouse``, ``--engine``,
``--strict``). Values stay strings until a typed getter reads them, and every error names the key
and where its value came from, because "invalid literal for int()" helps nobody at 3 a.m.

Importing this module never imports pyspark: the pure core and the command-line parsing of every
job use it, and must stay fast and Spark-free.
"""

from __future__ import annotations

import difflib
import os
import re
import warnings
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import NoReturn

from kraftlake.metadata import progress

__all__ = [
    "Config",
    "ConfigError",
    "ConfigWarning",
    "ANOMALY_THRESHOLDS",
    "DECODE_LIMITS",
    "ENGINES",
    "INGEST_BOUNDS",
    "STORAGE_PREFIX",
    "default_properties_path",
    "defaults",
    "load_config",
    "load_layers",
    "parse_override",
    "parse_properties",
    "read_properties",
    "setting",
]

#: Storage engines ``kraftlake.engine`` may name.
ENGINES = ("auto", "native", "delta-rs")
#: What one input may cost (``kraftlake.codec.bounds.Limits``): a batch, a record, a hand-written event, in bytes.
DECODE_LIMITS = ("kraftlake.decode.batch.max.bytes", "kraftlake.decode.record.max.bytes",
                 "kraftlake.decode.event.max.bytes")
#: Where an event may land as it enters the log (``kraftlake.codec.bounds.Limits``): how many offsets past the
#: log's end, how many ms past the clock of the job that writes it.
INGEST_BOUNDS = ("kraftlake.ingest.offset.max.gap", "kraftlake.ingest.timestamp.after.max.ms")
#: The anomaly rules' thresholds (``kraftlake.controller.anomalies``, ``kraftlake.raft.anomalies``), each a count
#: or event-time ms of at least 1.
ANOMALY_THRESHOLDS = ("kraftlake.anomaly.reassignment.stuck.ms", "kraftlake.anomaly.broker.flapping.unfencings",
                      "kraftlake.anomaly.broker.flapping.window.ms", "kraftlake.anomaly.quorum.lag.time.max.ms")
#: Settings under this prefix are delta-rs storage options (``kraftlake.storage.aws_endpoint_url``, ...).
STORAGE_PREFIX = "kraftlake.storage."

_DEFAULTS_FILE = "kraftlake.properties"
_PACKAGED_DEFAULTS = "defaults.properties"
_MISSING: object = object()
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")  # two letters at least: "C:\x" is a Windows path
_TRUE, _FALSE = "true", "false"


class ConfigError(ValueError):
    """A setting is missing or cannot be read; the message says which key and where it came from."""


class ConfigWarning(UserWarning):
    """A setting looks like a mistake (e.g. a misspelt ``kraftlake.*`` key) but does not stop the job."""


# --------------------------------------------------------------------------------------------
# Properties files
# --------------------------------------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str, source: str, lineno: int) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError(f"{source}:{lineno}: malformed \\uXXXX escape")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Join continued lines the way java.util.Properties does: an odd number of trailing
    backslashes continues the line, and the continuation's leading whitespace is dropped."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue  # comments are never continued
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(" \t\f")
            i += 1
        yield start + 1, line


def parse_properties(text: str, source: str = "<string>") -> dict[str, str]:
    """Parse Java-properties text into a dict; later duplicates win, as in Java.

    Supported: ``#``/``!`` comment lines, ``key=value``, ``key: value`` and ``key value``,
    blank lines, ``\\`` line continuations and the usual backslash escapes. Unlike Java, trailing
    whitespace is stripped from values: an invisible space after ``shards=4`` should not make
    the number unreadable.
    """
    result: dict[str, str] = {}
    for lineno, line in _logical_lines(text):
        # The key ends at the first unescaped '=', ':' or whitespace.
        i, n = 0, len(line)
        while i < n:
            ch = line[i]
            if ch == "\\":
                i += 2
                continue
            if ch in "=: \t\f":
                break
            i += 1
        raw_key, rest = line[:i], line[i:]
        rest = rest.lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        key = _unescape(raw_key, source, lineno)
        if not key:
            raise ConfigError(f"{source}:{lineno}: line has a value but no key: {line!r}")
        result[key] = _unescape(rest.rstrip(" \t\f"), source, lineno)
    return result


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a properties file (UTF-8), with errors that name the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {p}: {e}") from None
    return parse_properties(text, str(p))


def default_properties_path() -> Path | None:
    """The repository's ``conf/kraftlake.properties`` next to this package, if there is one.

    Looked for a few levels up only (lib/kraftlake -> repo root, or from inside
    build/kraftlake.zip), so an installed package never picks up an unrelated ``conf/``.
    """
    package = Path(__file__).resolve().parents[1]  # kraftlake/, from kraftlake/metadata/config.py
    for parent in list(package.parents)[:3]:
        candidate = parent / "conf" / _DEFAULTS_FILE
        if candidate.is_file():
            return candidate
    return None


def _shipped_defaults() -> tuple[dict[str, str], str]:
    path = default_properties_path()
    if path is not None:
        return read_properties(path), str(path)
    # importlib.resources also reads from inside a zip (spark-submit --py-files) or a wheel.
    resource = resources.files("kraftlake").joinpath(_PACKAGED_DEFAULTS)
    label = f"kraftlake/{_PACKAGED_DEFAULTS} (packaged defaults)"
    return parse_properties(resource.read_text(encoding="utf-8"), label), label


@lru_cache(maxsize=1)
def defaults() -> Mapping[str, str]:
    """The shipped defaults: the one place a setting's default value is written. The pure core reads a
    Kafka config's default here when the configs it was handed leave it out."""
    return MappingProxyType(_shipped_defaults()[0])


def setting(config: Mapping[str, str], key: str) -> str:
    """``key`` from ``config``, else its shipped default (a key with neither is a bug: KeyError)."""
    value = config.get(key)
    return defaults()[key] if value is None else value


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


class Config(Mapping[str, str]):
    """Immutable str -> str settings that remember where each value came from.

    Jobs pass one Config around instead of loose arguments, and read it through the typed
    getters so that a bad value fails at startup with the key and the file in the message.
    """

    __slots__ = ("_values", "_sources")

    def __init__(self, values: Mapping[str, str] | None = None, sources: Mapping[str, str] | None = None):
        vals = dict(values or {})
        for k, v in vals.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"config keys and values must be str, got {k!r}={v!r}")
        srcs = {k: (sources or {}).get(k, "<code>") for k in vals}
        object.__setattr__(self, "_values", MappingProxyType(vals))
        object.__setattr__(self, "_sources", MappingProxyType(srcs))

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("Config is immutable; use with_overrides()")

    def __getitem__(self, key: str) -> str:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Config({dict(self._values)!r})"

    def __hash__(self) -> int:
        return hash(frozenset(self._values.items()))

    def source(self, key: str) -> str:
        """Where the value of ``key`` came from (a file path, ``--override``, ...)."""
        return self._sources.get(key, "<unset>")

    def with_overrides(self, values: Mapping[str, str], source: str = "<code>") -> Config:
        """A new Config with ``values`` layered on top."""
        merged, sources = dict(self._values), dict(self._sources)
        for k, v in values.items():
            merged[k] = v
            sources[k] = source
        return Config(merged, sources)

    def subset(self, prefix: str) -> dict[str, str]:
        """Every setting whose key starts with ``prefix`` (keys kept whole), e.g. ``"spark."``."""
        return {k: v for k, v in self._values.items() if k.startswith(prefix)}

    # -- typed getters -------------------------------------------------------------------------

    def _fail(self, key: str, value: str, expected: str) -> NoReturn:
        raise ConfigError(f"{key}={value!r} (from {self.source(key)}): expected {expected}")

    def _raw(self, key: str, default: object) -> str | None:
        if key in self._values:
            return self._values[key]
        if default is _MISSING:
            raise ConfigError(
                f"missing setting {key!r}: not in the defaults, the --conf-file or the --override entries"
            )
        return None

    def get_str(self, key: str, default: object = _MISSING, *, choices: Iterable[str] | None = None) -> str:
        raw = self._raw(key, default)
        if raw is None:
            return default  # type: ignore[return-value]
        value = raw.strip()
        if choices is not None:
            allowed = list(choices)
            if value not in allowed:
                self._fail(key, raw, "one of " + ", ".join(allowed))
        return value

    def get_int(self, key: str, default: object = _MISSING, *, minimum: int | None = None) -> int:
        raw = self._raw(key, default)
        if raw is None:
            return default  # type: ignore[return-value]
        try:
            value = int(raw.strip(), 10)
        except ValueError:
            self._fail(key, raw, "an integer")
        if minimum is not None and value < minimum:
            self._fail(key, raw, f"an integer >= {minimum}")
        return value

    def get_bool(self, key: str, default: object = _MISSING) -> bool:
        """Kafka's rule: ``true`` or ``false``, any case, nothing else (no yes/1/on guessing)."""
        raw = self._raw(key, default)
        if raw is None:
            return default  # type: ignore[return-value]
        value = raw.strip().lower()
        if value == _TRUE:
            return True
        if value == _FALSE:
            return False
        self._fail(key, raw, "true or false")

    def get_path(self, key: str, default: object = _MISSING) -> str:
        """A local path made absolute against the current directory (``~`` expanded), or a URI
        (``s3a://...``, ``file:/...``) as given. A string, not a Path, so URIs survive."""
        raw = self._raw(key, default)
        if raw is None:
            return default  # type: ignore[return-value]
        value = raw.strip()
        if not value:
            self._fail(key, raw, "a path or URI")
        if _URI.match(value):
            return value
        return os.path.abspath(os.path.expanduser(value))


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def parse_override(entry: str) -> tuple[str, str]:
    key, sep, value = entry.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--override expects KEY=VALUE, got {entry!r}")
    return key, value.strip()


def _validate(config: Config) -> None:
    """Read the kraftlake.* keys every job relies on once, so a typo fails before Spark starts."""
    config.get_path("kraftlake.warehouse")
    config.get_str("kraftlake.engine", choices=ENGINES)
    config.get_int("kraftlake.shards", minimum=1)
    config.get_bool("kraftlake.strict")
    config.get_int("kraftlake.ingest.batch.records", minimum=1)
    for key in (*DECODE_LIMITS, *INGEST_BOUNDS, *ANOMALY_THRESHOLDS):
        config.get_int(key, minimum=1)
    config.get_str("kraftlake.progress", choices=progress.MODES)
    config.get_int("kraftlake.progress.interval.ms", minimum=0)


def _warn_unknown(known: Iterable[str], layer: Mapping[str, str], source: str) -> None:
    known = set(known)
    for key in layer:
        # kraftlake.storage.* pass through to delta-rs, whose storage options are its own to check
        if key.startswith("kraftlake.") and not key.startswith(STORAGE_PREFIX) and key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            warnings.warn(f"unknown setting {key!r} (from {source}){hint}", ConfigWarning, stacklevel=3)


def load_layers(conf_file: str | os.PathLike[str] | None, layers: Iterable[tuple[Mapping[str, str], str]]) -> Config:
    defaults, defaults_source = _shipped_defaults()
    config = Config(defaults, {k: defaults_source for k in defaults})
    if conf_file is not None:
        layer = read_properties(conf_file)
        _warn_unknown(defaults, layer, str(conf_file))
        config = config.with_overrides(layer, str(conf_file))
    for layer, source in layers:
        _warn_unknown(defaults, layer, source)
        config = config.with_overrides(layer, source)
    _validate(config)
    return config


def load_config(conf_file: str | os.PathLike[str] | None = None, overrides: Iterable[str] = ()) -> Config:
    """Defaults, then ``conf_file``, then ``KEY=VALUE`` overrides (in order; later wins)."""
    return load_layers(conf_file, [(dict(parse_override(e) for e in overrides), "--override")])
