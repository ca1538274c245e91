"""The message schemas (``schemas/**/*.avsc``) as Python objects.

The ``.avsc`` files are the single source of truth: the binary codec, JSON validation, the Avro reader
and the Arrow (hence Delta and Spark) types are all derived here from them. Avro cannot say everything
Kafka's wire format needs (int16 vs int32, in which versions a field exists, tagged fields), so each
record and field carries a ``kafka`` attribute with Kafka's own facts.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa

from kraftlake.metadata import uuids

NO_DEFAULT = object()

# Kafka primitive type → Arrow type. uint16 widens to int32 and uint32 to int64 (Delta has no unsigned).
ARROW_PRIMITIVES: dict[str, pa.DataType] = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "uint16": pa.int32(),
    "int32": pa.int32(),
    "uint32": pa.int64(),
    "int64": pa.int64(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "string": pa.string(),
    "uuid": pa.string(),
    "bytes": pa.binary(),
    "records": pa.binary(),
}

INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


@dataclass(frozen=True)
class Versions:
    """A Kafka version range such as ``0+``, ``1-3``, ``2`` or ``none``."""

    low: int
    high: int | None  # None: open ended

    @classmethod
    def parse(cls, text: str | None) -> "Versions":
        if text is None or text == "none":
            return cls(1, 0)  # empty
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            low, high = text.split("-", 1)
            return cls(int(low), int(high))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return version >= self.low and (self.high is None or version <= self.high)

    def __str__(self) -> str:
        if self.high is None:
            return f"{self.low}+"
        if self.high < self.low:
            return "none"
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


@dataclass(frozen=True)
class FieldSpec:
    name: str
    ktype: str  # Kafka's type: "int32", "[]int32", "uuid", "[]BrokerEndpoint", "SnapshotId", ...
    versions: Versions
    nullable_versions: Versions
    tagged_versions: Versions
    tag: int | None
    kafka_default: str | None
    struct: "StructSpec | None"  # for struct and []struct fields

    @property
    def is_array(self) -> bool:
        return self.ktype.startswith("[]")

    @property
    def element(self) -> str:
        """The Kafka type of one element (the type itself for non-arrays)."""
        return self.ktype[2:] if self.is_array else self.ktype

    def default(self) -> Any:
        """Kafka's default for this field, as its generated message classes set it."""
        text = self.kafka_default
        if text == "null":
            return None
        if self.is_array:
            return []
        if self.struct is not None:
            return self.struct.defaults()
        element = self.element
        if element in INT_RANGES:
            return int(text, 0) if text else 0
        if element == "float64":
            return float(text) if text else 0.0
        if element == "bool":
            return text == "true"
        if element == "string":
            return text or ""
        if element == "uuid":
            return uuids.ZERO_UUID
        if element in ("bytes", "records"):
            return b""
        raise ValueError(f"field {self.name}: no default for type {self.ktype}")

    @cached_property
    def arrow_type(self) -> pa.DataType:
        inner = self.struct.arrow_type if self.struct is not None else ARROW_PRIMITIVES[self.element]
        return pa.list_(inner) if self.is_array else inner


@dataclass(frozen=True)
class StructSpec:
    name: str
    fields: tuple[FieldSpec, ...]

    def defaults(self) -> dict[str, Any]:
        """A fresh dict of every field's default (callers fill it in): immutable defaults are computed
        once, lists and nested structs made anew, as this runs for every record the core builds."""
        out = dict(self._scalar_defaults)
        for name, struct in self._fresh:
            out[name] = [] if struct is None else struct.defaults()
        return out

    @cached_property
    def _fresh_defaults(self) -> tuple[FieldSpec, ...]:
        return tuple(f for f in self.fields if f.kafka_default != "null" and (f.is_array or f.struct is not None))

    @cached_property
    def _fresh(self) -> tuple[tuple[str, StructSpec | None], ...]:
        """(name, struct) of ``_fresh_defaults``, None for a list: read once, not through ``is_array`` per call
        (an AlterPartition's answer makes one per partition)."""
        return tuple((f.name, None if f.is_array else f.struct) for f in self._fresh_defaults)

    @cached_property
    def _scalar_defaults(self) -> dict[str, Any]:
        fresh = {f.name for f in self._fresh_defaults}
        return {f.name: (f.default() if f.name not in fresh else None) for f in self.fields}

    @cached_property
    def arrow_type(self) -> pa.StructType:
        return pa.struct([pa.field(f.name, f.arrow_type) for f in self.fields])

    @cached_property
    def by_name(self) -> dict[str, FieldSpec]:
        return {f.name: f for f in self.fields}


@dataclass(frozen=True)
class MessageSpec(StructSpec):
    kind: str = "metadata"  # metadata | control | request | response | data
    valid_versions: Versions = Versions(0, 0)
    flexible_versions: Versions = Versions(0, None)
    api_key: int | None = None
    control_type: int | None = None
    avro: dict = field(default_factory=dict, compare=False, repr=False)

    def check_version(self, version: int) -> None:
        if version not in self.valid_versions:
            raise UnknownVersionError(
                f"unknown version {version} of {self.name} (known: {self.valid_versions})")


class UnknownVersionError(ValueError):
    pass


def _struct(avro: dict, named: dict[str, StructSpec]) -> StructSpec:
    return StructSpec(avro["name"], tuple(_field(f, named) for f in avro["fields"]))



def _default_text(value: Any) -> str | None:
    """A field's ``default`` as Kafka's generator reads it: text, though a schema may write a number
    (DescribeQuorumResponse's timestamps: ``-1``) or a boolean as JSON's own."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)

def _field(avro_field: dict, named: dict[str, StructSpec]) -> FieldSpec:
    kafka = avro_field["kafka"]
    avro_type = avro_field["type"]
    if isinstance(avro_type, list):  # ["null", T]
        avro_type = avro_type[1]
    if isinstance(avro_type, dict) and avro_type.get("type") == "array":
        avro_type = avro_type["items"]
    struct = None
    if isinstance(avro_type, dict) and avro_type.get("type") == "record":
        struct = _struct(avro_type, named)
        named[avro_type["name"]] = struct
    elif isinstance(avro_type, str) and avro_type.rsplit(".", 1)[-1] in named:
        struct = named[avro_type.rsplit(".", 1)[-1]]  # a struct defined earlier in the same message
    tag = kafka.get("tag")
    return FieldSpec(
        name=avro_field["name"],
        ktype=kafka["type"],
        versions=Versions.parse(kafka.get("versions")),
        nullable_versions=Versions.parse(kafka.get("nullableVersions")),
        tagged_versions=Versions.parse(kafka.get("taggedVersions")),
        tag=int(tag) if tag is not None else None,
        kafka_default=_default_text(kafka.get("default")),
        struct=struct,
    )


def message_from_avro(avro: dict) -> MessageSpec:
    named: dict[str, StructSpec] = {}
    fields = tuple(_field(f, named) for f in avro["fields"])
    kafka = avro["kafka"]
    return MessageSpec(
        name=avro["name"],
        fields=fields,
        kind=kafka["kind"],
        valid_versions=Versions.parse(kafka["validVersions"]),
        flexible_versions=Versions.parse(kafka["flexibleVersions"]),
        api_key=kafka.get("apiKey"),
        control_type=kafka.get("controlType"),
        avro=avro,
    )


class Registry:
    """Every message schema, looked up by name, by metadata api key or by control record type."""

    def __init__(self, messages: Iterable[MessageSpec]):
        self.by_name: dict[str, MessageSpec] = {}
        self.metadata_by_api_key: dict[int, MessageSpec] = {}
        self.control_by_type: dict[int, MessageSpec] = {}
        for message in messages:
            self.by_name[message.name] = message
            if message.kind == "metadata":
                self.metadata_by_api_key[message.api_key] = message
            elif message.kind == "control":
                self.control_by_type[message.control_type] = message

    def __getitem__(self, name: str) -> MessageSpec:
        return self.by_name[name]

    def __contains__(self, name: str) -> bool:
        return name in self.by_name

    def event_types(self) -> list[MessageSpec]:
        """The types a ``metadata_log`` row can hold: records, control records, requests, and the quorum's
        traffic (the responses a replica receives and its lifecycle, ``schemas/quorum``)."""
        kinds = ("metadata", "control", "request", "response", "lifecycle")
        return sorted((m for m in self.by_name.values() if is_event_type(m)),
                      key=lambda m: (kinds.index(m.kind), m.name))


# Responses that are themselves inputs: a replica of the metadata quorum receives them from its peers.
# Other responses only ever come out of the controller (the ``responses`` table).
QUORUM_RESPONSES = frozenset({"VoteResponse", "BeginQuorumEpochResponse", "EndQuorumEpochResponse", "FetchResponse",
                              "DiscoverBrokersResponse", "FetchQuorumRecordsResponse"})  # the last two: KIP-595 draft
# The metadata quorum's traffic (KIP-595): handled by the quorum's replicas, never by the controller.
QUORUM_TRAFFIC = QUORUM_RESPONSES | {"VoteRequest", "BeginQuorumEpochRequest", "EndQuorumEpochRequest",
                                     "FetchRequest", "DescribeQuorumRequest", "AlterQuorumRequest",
                                     "DiscoverBrokersRequest", "FetchQuorumRecordsRequest",
                                     "ReplicaStartup", "ReplicaShutdown"}


def is_event_type(message: MessageSpec) -> bool:
    return message.kind in ("metadata", "control", "request", "lifecycle") or message.name in QUORUM_RESPONSES


def schema_dir() -> Path | resources.abc.Traversable:
    """Where the ``.avsc`` files are: the repo's ``schemas/``, or the copy shipped inside the package.

    Executors of a cluster only get the package (zipped by spark-submit.sh with the schemas inside as
    ``kraftlake/_schemas``), hence the fallback; ``KRAFTLAKE_SCHEMAS`` overrides both.
    """
    if os.environ.get("KRAFTLAKE_SCHEMAS"):
        return Path(os.environ["KRAFTLAKE_SCHEMAS"])
    repo_schemas = Path(__file__).resolve().parents[3] / "schemas"  # lib/kraftlake/metadata -> repo
    if repo_schemas.is_dir():
        return repo_schemas
    return resources.files("kraftlake") / "_schemas"


def _avsc_files(root: Any) -> Iterable[Any]:
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.is_dir():
            yield from _avsc_files(entry)
        elif entry.name.endswith(".avsc"):
            yield entry


@lru_cache(maxsize=1)
def registry() -> Registry:
    root = schema_dir()
    messages = []
    for entry in _avsc_files(root):
        avro = json.loads(entry.read_text())
        if "kafka" in avro:  # table schemas under schemas/tables have no Kafka facts
            messages.append(message_from_avro(avro))
    if not messages:
        raise FileNotFoundError(f"no message schemas (*.avsc) found under {root}")
    return Registry(messages)
