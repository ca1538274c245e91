"""Kafka's message wire format, driven by the schemas.

One interpreter serves every message type and version: each (message, version) is compiled once into a
list of field readers/writers from its ``.avsc`` (Kafka types, versions, nullable and tagged versions),
so adding a record or a version is a schema change, never a parser change.
"""

from __future__ import annotations

import functools
import struct
from typing import Any, Callable

from kraftlake.codec.bounds import STRING_MAX_BYTES
from kraftlake.metadata import uuids
from kraftlake.metadata.schemas import FieldSpec, MessageSpec, StructSpec

_INT = {
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "uint16": struct.Struct(">H"),
    "int32": struct.Struct(">i"),
    "uint32": struct.Struct(">I"),
    "int64": struct.Struct(">q"),
    "float64": struct.Struct(">d"),
}
_INT16 = _INT["int16"]
_INT32 = _INT["int32"]


class MessageError(ValueError):
    """A message's bytes do not parse as its schema says (Kafka: INVALID_RECORD / CORRUPT_MESSAGE)."""


class Reader:
    """A cursor over bytes; every read checks bounds so a short buffer is an error, not garbage."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | memoryview, pos: int = 0, end: int | None = None):
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise MessageError(f"needed {n} bytes at position {self.pos}, only {self.end - self.pos} left")
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return out

    def fixed(self, fmt: struct.Struct) -> Any:
        if self.pos + fmt.size > self.end:
            raise MessageError(f"needed {fmt.size} bytes at position {self.pos}, only {self.end - self.pos} left")
        value = fmt.unpack_from(self.buf, self.pos)[0]
        self.pos += fmt.size
        return value

    def uvarint(self) -> int:
        pos = self.pos
        if pos < self.end and self.buf[pos] < 0x80:  # most are one byte: lengths, tags, small ids
            self.pos = pos + 1
            return self.buf[pos]
        result = 0
        shift = 0
        buf = self.buf
        while True:
            if self.pos >= self.end:
                raise MessageError(f"varint runs past the end at position {self.pos}")
            b = buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise MessageError(f"varint longer than 10 bytes at position {self.pos}")

    def varint(self) -> int:
        """Zig-zag encoded signed varint (record framing)."""
        raw = self.uvarint()
        return (raw >> 1) ^ -(raw & 1)


def write_uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_varint(out: bytearray, value: int) -> None:
    write_uvarint(out, (value << 1) ^ (value >> 63))


Decoder = Callable[[Reader], Any]
Encoder = Callable[[bytearray, Any], None]


def _primitive_decoder(ktype: str, flexible: bool, nullable: bool, name: str) -> Decoder:
    if ktype in _INT:
        unpack, size = _INT[ktype].unpack_from, _INT[ktype].size

        def read_int(r: Reader) -> Any:
            pos = r.pos
            if pos + size > r.end:
                raise MessageError(f"needed {size} bytes at position {pos}, only {r.end - pos} left")
            r.pos = pos + size
            return unpack(r.buf, pos)[0]
        return read_int
    if ktype == "bool":
        return lambda r: r.take(1) != b"\x00"
    if ktype == "uuid":
        return lambda r: uuids.from_bytes(r.take(16))

    def length(r: Reader, wide: bool) -> int:
        if flexible:
            return r.uvarint() - 1
        return r.fixed(_INT32 if wide else _INT16)

    def null_check(n: int) -> None:
        if n < -1 or (n == -1 and not nullable):
            raise MessageError(f"field {name}: invalid length {n}")

    if ktype == "string":
        def read_string(r: Reader) -> str | None:
            n = length(r, False)
            null_check(n)
            if n == -1:
                return None
            if n > STRING_MAX_BYTES:  # as Kafka's generated readers: no string is longer
                raise MessageError(f"field {name}: string of invalid length {n}")
            try:
                return r.take(n).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise MessageError(f"field {name}: not UTF-8") from exc
        return read_string
    if ktype in ("bytes", "records"):
        def read_bytes(r: Reader) -> bytes | None:
            n = length(r, True)
            null_check(n)
            return None if n == -1 else r.take(n)
        return read_bytes
    raise MessageError(f"field {name}: unknown Kafka type {ktype}")


def _field_decoder(spec: FieldSpec, version: int, flexible: bool) -> Decoder:
    nullable = version in spec.nullable_versions
    if spec.struct is not None:
        inner = _struct_decoder(spec.struct, version, flexible)
    else:
        inner = _primitive_decoder(spec.element, flexible, nullable, spec.name)
    if not spec.is_array:
        if spec.struct is not None and nullable:
            def read_nullable_struct(r: Reader) -> Any:
                return None if r.fixed(_INT["int8"]) < 0 else inner(r)
            return read_nullable_struct
        return inner
    name = spec.name

    def read_length(r: Reader) -> int | None:
        n = r.uvarint() - 1 if flexible else r.fixed(_INT32)
        if n == -1 and nullable:
            return None
        if n < 0 or n > r.remaining():  # every element takes at least one byte
            raise MessageError(f"field {name}: invalid array length {n}")
        return n

    if spec.struct is None and spec.element in _INT:  # replicas, ISRs: all of them in one unpack
        size, code = _INT[spec.element].size, _INT[spec.element].format[-1]

        def read_numbers(r: Reader) -> list | None:
            n = read_length(r)
            if n is None:
                return None
            pos = r.pos
            if pos + n * size > r.end:  # as reading them one by one would fail, at the first that is not there
                short = pos + (r.end - pos) // size * size
                raise MessageError(f"needed {size} bytes at position {short}, only {r.end - short} left")
            r.pos = pos + n * size
            return list(_numbers(n, code).unpack_from(r.buf, pos))
        return read_numbers

    def read_array(r: Reader) -> list | None:
        n = read_length(r)
        return None if n is None else [inner(r) for _ in range(n)]
    return read_array


@functools.lru_cache(maxsize=1024)
def _numbers(count: int, code: str) -> struct.Struct:
    return struct.Struct(f">{count}{code}")


def _struct_decoder(spec: StructSpec, version: int, flexible: bool) -> Decoder:
    plan: list[tuple[str, Decoder]] = []
    tagged: dict[int, tuple[str, Decoder]] = {}
    defaults: list[FieldSpec] = []
    for f in spec.fields:
        if version not in f.versions:
            defaults.append(f)
        elif flexible and version in f.tagged_versions:
            tagged[f.tag] = (f.name, _field_decoder(f, version, flexible))
            defaults.append(f)
        else:
            plan.append((f.name, _field_decoder(f, version, flexible)))
    struct_name = spec.name
    # every field in the schema's order, holding its default: a copy is each decoded struct's start; the
    # defaults that are lists or dicts are made anew for each, as a caller may change them
    template = {f.name: None for f in spec.fields}
    fresh = []
    for f in defaults:
        value = f.default()
        if isinstance(value, (list, dict)):
            fresh.append(f)
        else:
            template[f.name] = value

    def read_struct(r: Reader) -> dict:
        out = template.copy()
        for f in fresh:
            out[f.name] = f.default()
        for name, decode in plan:
            out[name] = decode(r)
        if flexible:
            for _ in range(r.uvarint()):
                tag = r.uvarint()
                size = r.uvarint()
                if tag in tagged:
                    name, decode = tagged[tag]
                    sub = Reader(r.buf, r.pos, r.pos + size)
                    out[name] = decode(sub)
                    if sub.pos != sub.end:
                        raise MessageError(f"{struct_name}.{name}: tagged field has {sub.end - sub.pos} extra bytes")
                r.take(size)  # unknown tags are skipped, as Kafka keeps them opaque
        return out
    return read_struct


_compiled: dict[tuple[Callable, str, int], Callable] = {}


def _compiled_for(compile_struct: Callable, spec: MessageSpec, version: int) -> Callable:
    """Compile a (message, version) once, then look it up by name: hashing the spec itself would
    walk its whole field tree on every record."""
    key = (compile_struct, spec.name, version)
    compiled = _compiled.get(key)
    if compiled is None:
        spec.check_version(version)
        compiled = _compiled[key] = compile_struct(spec, version, version in spec.flexible_versions)
    return compiled


def message_decoder(spec: MessageSpec, version: int) -> Decoder:
    return _compiled_for(_struct_decoder, spec, version)


# ---- straight-line readers: the same decoding as one generated function per (message, version) ----
#
# The interpreter above calls a closure per field and a method per varint, on a Reader: ~1.9 µs of Python
# calls a message of a generated log (PartitionChangeRecords, NoOpRecords), ~1.2 this way. From the same
# schemas, each (message, version) also gets Python source read straight through (locals for the cursor,
# one ``struct`` unpack for each run of fixed-width fields, one-byte varints inline), compiled once. It
# accepts exactly what the interpreter accepts and gives the same values; what it does not accept it only
# refuses (``Refused``), and the interpreter reads that message again to say why, in its words: error
# texts have one source.

class Refused(Exception):
    """The straight-line reader does not accept these bytes (the interpreter says why)."""


NOT_READ = (Refused, ValueError, IndexError, struct.error)  # bytes.decode's UnicodeDecodeError is a ValueError
_FIXED = {**{ktype: fmt.format[-1] for ktype, fmt in _INT.items()}, "bool": "B", "uuid": "16s"}


def long_uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of a varint of more than one byte, refused where ``Reader.uvarint`` fails."""
    result = shift = 0
    while True:
        if pos >= end:
            raise Refused
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise Refused


class _Source:
    """The Python source of one (message, version)'s readers, and the values it names."""

    def __init__(self, version: int, flexible: bool) -> None:
        self.version, self.flexible = version, flexible
        self.lines: list[str] = []
        self.names: dict[str, Any] = {"Refused": Refused, "long_uvarint": long_uvarint, "_numbers": _numbers,
                                      "_uuid": uuids.from_bytes, "STRING_MAX_BYTES": STRING_MAX_BYTES}

    def name(self, value: Any, prefix: str) -> str:
        """A name in the generated module bound to ``value``."""
        name = f"{prefix}{len(self.names)}"
        self.names[name] = value
        return name

    def uvarint(self, out: list[str], pad: str, var: str) -> None:
        out += [f"{pad}if pos < end and buf[pos] < 0x80:",
                f"{pad}    {var} = buf[pos]",
                f"{pad}    pos += 1",
                f"{pad}else:",
                f"{pad}    {var}, pos = long_uvarint(buf, pos, end)"]

    def fixed(self, out: list[str], pad: str, run: list[tuple[str, str]]) -> None:
        """Consecutive fixed-width values (Kafka type, variable) read by one unpack, refused when any of them
        is not all there (reading them one by one would fail at that one); ``run`` emptied."""
        if not run:
            return
        fmt = self.name(struct.Struct(">" + "".join(_FIXED[ktype] for ktype, _ in run)), "S")
        out += [f"{pad}if pos + {fmt}.size > end:", f"{pad}    raise Refused",
                f"{pad}{', '.join(var for _, var in run)}, = {fmt}.unpack_from(buf, pos)",
                f"{pad}pos += {fmt}.size"]
        for ktype, var in run:
            if ktype == "bool":
                out.append(f"{pad}{var} = {var} != 0")
            elif ktype == "uuid":
                out.append(f"{pad}{var} = _uuid({var})")
        run.clear()

    def length(self, out: list[str], pad: str, wide: bool, nullable: bool, var: str) -> None:
        """A string's or bytes' length into ``var``, refused as ``_primitive_decoder``'s null check refuses."""
        if self.flexible:
            self.uvarint(out, pad, var)
            out.append(f"{pad}{var} -= 1")
        else:
            self.fixed(out, pad, [("int32" if wide else "int16", var)])
        out += [f"{pad}if {var} < {-1 if nullable else 0}:", f"{pad}    raise Refused"]

    def primitive(self, out: list[str], pad: str, ktype: str, nullable: bool, var: str) -> None:
        """Code reading one value of Kafka type ``ktype`` into ``var``, as ``_primitive_decoder``'s reader."""
        if ktype in _FIXED:
            self.fixed(out, pad, [(ktype, var)])
            return
        if ktype not in ("string", "bytes", "records"):
            raise MessageError(f"unknown Kafka type {ktype}")
        string = ktype == "string"
        self.length(out, pad, not string, nullable, "n")
        out += [f"{pad}if n == -1:", f"{pad}    {var} = None", f"{pad}else:"]
        if string:
            out += [f"{pad}    if n > STRING_MAX_BYTES:", f"{pad}        raise Refused"]
        out += [f"{pad}    if pos + n > end:", f"{pad}        raise Refused",
                f"{pad}    {var} = buf[pos:pos + n]{'.decode()' if string else ''}", f"{pad}    pos += n"]

    def field(self, out: list[str], pad: str, spec: FieldSpec, var: str) -> None:
        """Code reading field ``spec`` into ``var``, as ``_field_decoder``'s reader."""
        nullable = self.version in spec.nullable_versions
        if not spec.is_array:
            if spec.struct is None:
                self.primitive(out, pad, spec.element, nullable, var)
                return
            read = self.struct(spec.struct)
            if nullable:
                self.fixed(out, pad, [("int8", "present")])
                out += [f"{pad}if present < 0:", f"{pad}    {var} = None", f"{pad}else:",
                        f"{pad}    {var}, pos = {read}(buf, pos, end)"]
            else:
                out.append(f"{pad}{var}, pos = {read}(buf, pos, end)")
            return
        if self.flexible:
            self.uvarint(out, pad, "n")
            out.append(f"{pad}n -= 1")
        else:
            self.fixed(out, pad, [("int32", "n")])
        if nullable:
            out += [f"{pad}if n == -1:", f"{pad}    {var} = None", f"{pad}elif n < 0 or n > end - pos:"]
        else:
            out.append(f"{pad}if n < 0 or n > end - pos:")
        out.append(f"{pad}    raise Refused")
        if spec.struct is None and spec.element in _INT:
            size, code = _INT[spec.element].size, _INT[spec.element].format[-1]
            out += [f"{pad}elif pos + n * {size} > end:", f"{pad}    raise Refused",
                    f"{pad}else:", f"{pad}    {var} = list(_numbers(n, {code!r}).unpack_from(buf, pos))",
                    f"{pad}    pos += n * {size}"]
            return
        out += [f"{pad}else:", f"{pad}    {var} = []", f"{pad}    for _ in range(n):"]
        if spec.struct is not None:
            out.append(f"{pad}        item, pos = {self.struct(spec.struct)}(buf, pos, end)")
        else:
            self.primitive(out, pad + "        ", spec.element, nullable, "item")
        out.append(f"{pad}        {var}.append(item)")

    def struct(self, spec: StructSpec) -> str:
        """A generated function ``(buf, pos, end) -> (dict, pos)`` reading ``spec`` as ``_struct_decoder``'s
        reader (fields in the schema's order, defaults where absent); its name."""
        version, flexible = self.version, self.flexible
        body: list[str] = []
        values: dict[str, str] = {}
        tagged: list[tuple[FieldSpec, str]] = []
        run: list[tuple[str, str]] = []  # (Kafka type, variable) of consecutive fixed-width fields
        for index, f in enumerate(spec.fields):
            var = f"f{index}"
            if version in f.versions and not (flexible and version in f.tagged_versions):
                values[f.name] = var
                if not f.is_array and f.struct is None and f.element in _FIXED:
                    run.append((f.element, var))
                    continue
                self.fixed(body, "    ", run)
                self.field(body, "    ", f, var)
                continue
            default = f.default()
            values[f.name] = (f"{self.name(f.default, 'D')}()" if isinstance(default, (list, dict))
                              else self.name(default, "D"))
            if version in f.versions:
                tagged.append((f, var))
        self.fixed(body, "    ", run)
        if flexible:
            for f, var in tagged:
                body.append(f"    {var} = {values[f.name]}")
                values[f.name] = var
            self.uvarint(body, "    ", "count")
            body.append("    for _ in range(count):")
            self.uvarint(body, "        ", "tag")
            self.uvarint(body, "        ", "size")
            body += ["        if pos + size > end:", "            raise Refused"]
            for f, var in tagged:
                body += [f"        if tag == {f.tag}:", "            outer, end = end, pos + size"]
                self.field(body, "            ", f, var)
                body += ["            if pos != end:", "                raise Refused", "            end = outer",
                         "            continue"]
            body.append("        pos += size")
        name = f"read_{spec.name}_{len(self.lines)}"
        self.lines += [f"def {name}(buf, pos, end):", *body,
                       "    return {" + ", ".join(f"{k!r}: {v}" for k, v in values.items()) + "}, pos", ""]
        return name


def _straight_line_decoder(spec: MessageSpec, version: int, flexible: bool) -> Callable[[bytes], dict]:
    """One whole message read by generated code (see ``_Source``); raises one of ``NOT_READ`` where
    ``decode_message``'s interpreter would raise."""
    source = _Source(version, flexible)
    read = source.struct(spec)
    source.lines += ["def read_message(buf):", f"    data, pos = {read}(buf, 0, len(buf))",
                     "    if pos != len(buf):", "        raise Refused", "    return data"]
    namespace = dict(source.names)
    exec(compile("\n".join(source.lines), f"<{spec.name} v{version} reader>", "exec"), namespace)
    return namespace["read_message"]


def decode_message(spec: MessageSpec, version: int, buf: bytes | memoryview) -> dict:
    """Decode one whole message; trailing bytes are an error, as in Kafka's MetadataRecordSerde."""
    read = _compiled_for(_straight_line_decoder, spec, version)
    try:
        return read(buf if isinstance(buf, bytes) else bytes(buf))
    except NOT_READ:
        pass  # the interpreter reads it again, to say what is wrong
    reader = Reader(buf)
    data = message_decoder(spec, version)(reader)
    if reader.remaining():
        raise MessageError(f"{reader.remaining()} bytes left over after {spec.name} v{version}")
    return data


# ---- encoding: the mirror image, used by the sample generator, the simulator and the tests ----

def as_written(spec: StructSpec, data: dict, version: int) -> dict:
    """Only the fields ``version`` has, at every level: what Kafka's JSON converter prints.

    Decoding fills in a default for every field the version lacks (decisions read one shape for every
    version); a dump must not, or a LeaderChangeMessage v0 would seem to carry v1's voter directories.
    """
    out = {}
    for f in spec.fields:
        if version not in f.versions or f.name not in data:
            continue
        value = data[f.name]
        if f.struct is not None and value is not None:
            value = ([as_written(f.struct, item, version) for item in value] if f.is_array
                     else as_written(f.struct, value, version))
        out[f.name] = value
    return out


def _primitive_encoder(ktype: str, flexible: bool, name: str) -> Encoder:
    if ktype in _INT:
        fmt = _INT[ktype]
        return lambda out, v: out.extend(fmt.pack(v))
    if ktype == "bool":
        return lambda out, v: out.append(1 if v else 0)
    if ktype == "uuid":
        return lambda out, v: out.extend(uuids.to_bytes(v))

    def length(out: bytearray, n: int, wide: bool) -> None:
        if flexible:
            write_uvarint(out, n + 1)
        else:
            out.extend((_INT32 if wide else _INT16).pack(n))

    if ktype == "string":
        def write_string(out: bytearray, v: str | None) -> None:
            if v is None:
                length(out, -1, False)
                return
            raw = v.encode("utf-8")
            length(out, len(raw), False)
            out.extend(raw)
        return write_string

    def write_bytes(out: bytearray, v: bytes | None) -> None:
        if v is None:
            length(out, -1, True)
            return
        length(out, len(v), True)
        out.extend(v)
    return write_bytes


def _field_encoder(spec: FieldSpec, version: int, flexible: bool) -> Encoder:
    if spec.struct is not None:
        inner = _struct_encoder(spec.struct, version, flexible)
    else:
        inner = _primitive_encoder(spec.element, flexible, spec.name)
    if not spec.is_array:
        if spec.struct is not None and version in spec.nullable_versions:
            def write_nullable_struct(out: bytearray, v: Any) -> None:
                if v is None:
                    out.append(0xFF)
                else:
                    out.append(1)
                    inner(out, v)
            return write_nullable_struct
        return inner

    def write_array(out: bytearray, v: list | None) -> None:
        if v is None:
            if flexible:
                write_uvarint(out, 0)
            else:
                out.extend(_INT32.pack(-1))
            return
        if flexible:
            write_uvarint(out, len(v) + 1)
        else:
            out.extend(_INT32.pack(len(v)))
        for item in v:
            inner(out, item)
    return write_array


def _struct_encoder(spec: StructSpec, version: int, flexible: bool) -> Encoder:
    plan: list[tuple[str, Encoder]] = []
    tagged: list[tuple[int, FieldSpec, Encoder]] = []
    for f in spec.fields:
        if version not in f.versions:
            continue
        if flexible and version in f.tagged_versions:
            tagged.append((f.tag, f, _field_encoder(f, version, flexible)))
        else:
            plan.append((f.name, _field_encoder(f, version, flexible)))
    tagged.sort(key=lambda t: t[0])

    def write_struct(out: bytearray, data: dict) -> None:
        for name, encode in plan:
            encode(out, data[name])
        if not flexible:
            return
        present = [(tag, f, enc) for tag, f, enc in tagged if data.get(f.name) != f.default()]
        write_uvarint(out, len(present))
        for tag, f, encode in present:
            body = bytearray()
            encode(body, data[f.name])
            write_uvarint(out, tag)
            write_uvarint(out, len(body))
            out.extend(body)
    return write_struct


def message_encoder(spec: MessageSpec, version: int) -> Encoder:
    return _compiled_for(_struct_encoder, spec, version)


def encode_message(spec: MessageSpec, version: int, data: dict) -> bytes:
    """Encode ``data`` (every field present, as the decoder returns it) at ``version``."""
    out = bytearray()
    message_encoder(spec, version)(out, data)
    return bytes(out)
