#!/usr/bin/env python3
"""Turn Kafka message definitions (Kafka's own JSON message schemas) into kraftlake's ``schemas/*.avsc``.

The ``.avsc`` files are the project's single source of truth; this tool only seeds them. Run it again
when Kafka adds a record or a version (point it at a JSON file holding ``{MessageName: definition}``,
the format of ``shared/kafka-facts/messages.json``) and review the diff: hand-made additions to the
``.avsc`` files are overwritten for the messages named in the input, and kept for all others.

Usage: tools/import_kafka_messages.py MESSAGES.json [SCHEMAS_DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# Control records carry their type in the record key (Kafka's ControlRecordType), not an api key.
CONTROL_TYPES = {
    "LeaderChangeMessage": 2,
    "SnapshotHeaderRecord": 3,
    "SnapshotFooterRecord": 4,
    "KRaftVersionRecord": 5,
    "VotersRecord": 6,
}

PRIMITIVES = {
    "int8": "int",
    "int16": "int",
    "uint16": "int",
    "int32": "int",
    "uint32": "long",
    "int64": "long",
    "float64": "double",
    "bool": "boolean",
    "string": "string",
    "uuid": "string",
    "bytes": "bytes",
    "records": "bytes",
}

FIELD_KEYS = ("versions", "nullableVersions", "taggedVersions", "tag", "default", "mapKey",
              "entityType", "ignorable")


def kind_of(definition: dict) -> str:
    if definition["name"] in CONTROL_TYPES:
        return "control"
    return definition["type"]  # metadata | request | response | data


def convert_message(definition: dict) -> dict:
    name = definition["name"]
    namespace = f"kafka.{kind_of(definition)}"
    common = {s["name"]: s for s in definition.get("commonStructs", [])}
    defined: set[str] = set()

    def struct(struct_name: str, fields: list[dict]) -> Any:
        if struct_name in defined:
            return f"{namespace}.{name}.{struct_name}"  # full name: Avro resolves short names elsewhere
        defined.add(struct_name)
        return {
            "type": "record",
            "name": struct_name,
            "namespace": f"{namespace}.{name}",
            "fields": [field(f) for f in fields],
        }

    def field_type(f: dict) -> Any:
        ktype = f["type"]
        if ktype.startswith("[]"):
            inner = ktype[2:]
            items = PRIMITIVES.get(inner) or struct(inner, f.get("fields") or common[inner]["fields"])
            return {"type": "array", "items": items}
        if ktype in PRIMITIVES:
            return PRIMITIVES[ktype]
        return struct(ktype, f.get("fields") or common[ktype]["fields"])

    def field(f: dict) -> dict:
        kafka = {"type": f["type"]}
        kafka.update({k: f[k] for k in FIELD_KEYS if k in f})
        avro_type = field_type(f)
        if "nullableVersions" in f:
            return {"name": f["name"], "type": ["null", avro_type], "default": None, "kafka": kafka}
        return {"name": f["name"], "type": avro_type, "kafka": kafka}

    record_kafka = {"kind": kind_of(definition), "validVersions": definition["validVersions"],
                    "flexibleVersions": definition["flexibleVersions"]}
    if "apiKey" in definition:
        record_kafka["apiKey"] = definition["apiKey"]
    if name in CONTROL_TYPES:
        record_kafka["controlType"] = CONTROL_TYPES[name]
    return {
        "type": "record",
        "name": name,
        "namespace": namespace,
        "kafka": record_kafka,
        "fields": [field(f) for f in definition["fields"]],
    }


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    messages = json.loads(Path(argv[1]).read_text())
    out = Path(argv[2] if len(argv) > 2 else Path(__file__).resolve().parent.parent / "schemas")
    for definition in messages.values():
        schema = convert_message(definition)
        target = out / schema["kafka"]["kind"] / f"{definition['name']}.avsc"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(schema, indent=2) + "\n")
    print(f"wrote {len(messages)} schemas under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
