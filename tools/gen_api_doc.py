#!/usr/bin/python3
"""Writes docs/api.md, the gRPC API reference, from the comments in the .proto files.

    /usr/bin/python3 tools/gen_api_doc.py            # rewrite docs/api.md
    /usr/bin/python3 tools/gen_api_doc.py --check    # exit 1 if docs/api.md is stale

The .proto files are the source of truth: every service, rpc, message, field
and enum value is documented by the comment lines right above it (or at the
end of its line). This script parses the subset of proto3 the project uses
and refuses, naming file and line, any statement it does not understand, so
that nothing in a .proto can be left out of the reference unnoticed.
Standard library only. tests/docs/ checks that docs/api.md is up to date.
"""

import argparse
import dataclasses
import os
import re
import sys
from typing import List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUT = "docs/api.md"
# The torchmon API first, then the standard health protocol torchmond serves.
PROTOS = ["proto/torchmon/v1/torchmon.proto", "proto/grpc/health/v1/health.proto"]


@dataclasses.dataclass
class Field:
    name: str
    number: int
    type: str
    label: str  # "", "repeated", "optional" or "map"
    comment: List[str]
    oneof: str = ""


@dataclasses.dataclass
class EnumValue:
    name: str
    number: int
    comment: List[str]


@dataclasses.dataclass
class Enum:
    name: str  # dotted inside its message, e.g. "HealthCheckResponse.ServingStatus"
    comment: List[str]
    values: List[EnumValue] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Message:
    name: str
    comment: List[str]
    fields: List[Field] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Rpc:
    name: str
    request: str
    request_stream: bool
    response: str
    response_stream: bool
    comment: List[str]


@dataclasses.dataclass
class Service:
    name: str
    comment: List[str]
    rpcs: List[Rpc] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Section:
    title: str  # "" for what comes before the first banner
    elements: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ProtoFile:
    path: str
    package: str = ""
    header: List[str] = dataclasses.field(default_factory=list)
    sections: List[Section] = dataclasses.field(default_factory=lambda: [Section("")])


_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_TYPE = r"\.?[A-Za-z_][A-Za-z0-9_.]*"
_RE_SYNTAX = re.compile(r'^syntax\s*=\s*"proto3"\s*;$')
_RE_PACKAGE = re.compile(rf"^package\s+({_TYPE})\s*;$")
_RE_OPTION = re.compile(r"^option\s+.*;$")
_RE_IMPORT = re.compile(r'^import\s+(public\s+|weak\s+)?"[^"]+"\s*;$')
_RE_OPEN = re.compile(rf"^(service|message|enum|oneof)\s+({_IDENT})\s*\{{$")
_RE_RPC = re.compile(
    rf"^rpc\s+({_IDENT})\s*\(\s*(stream\s+)?({_TYPE})\s*\)\s*returns\s*"
    rf"\(\s*(stream\s+)?({_TYPE})\s*\)\s*(;|\{{\s*\}})$")
_RE_FIELD = re.compile(
    rf"^(repeated\s+|optional\s+)?({_TYPE})\s+({_IDENT})\s*=\s*(\d+)\s*(\[[^\]]*\])?\s*;$")
_RE_MAP = re.compile(
    rf"^map\s*<\s*({_TYPE})\s*,\s*({_TYPE})\s*>\s*({_IDENT})\s*=\s*(\d+)\s*(\[[^\]]*\])?\s*;$")
_RE_ENUM_VALUE = re.compile(rf"^({_IDENT})\s*=\s*(-?\d+)\s*(\[[^\]]*\])?\s*;$")
_RE_BANNER = re.compile(r"^-{5,}$")


def _split_comment(line: str):
    """Returns (code, trailing comment or None). Knows "//" inside strings."""
    in_string = False
    for i, ch in enumerate(line):
        if ch == '"' and (i == 0 or line[i - 1] != "\\"):
            in_string = not in_string
        elif not in_string and line.startswith("//", i):
            return line[:i].rstrip(), _comment_text(line[i:])
    return line.rstrip(), None


def _comment_text(comment: str) -> str:
    text = comment[2:]
    return text[1:] if text.startswith(" ") else text


def parse_proto(path: str, text: str) -> ProtoFile:
    """Parses one .proto file. Raises ValueError naming path:line on anything unknown."""
    proto = ProtoFile(path)
    pending: List[str] = []  # comment lines right above the current line
    stack: list = []  # open blocks: Service, Message, Enum, or ("oneof", name, Message)

    def fail(lineno: int, why: str):
        raise ValueError(f"{path}:{lineno}: {why}")

    for lineno, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped:
            pending = []
            continue
        if stripped.startswith("/*"):
            fail(lineno, "block comments are not supported; use // lines")
        if stripped.startswith("//"):
            pending.append(_comment_text(stripped))
            continue
        code, trailing = _split_comment(stripped)
        comment = pending + ([trailing] if trailing else [])
        pending = []
        # A banner ("// ----" / "// Title" / "// ----") is a blank-line-separated
        # block of its own: it opens a section.
        top = stack[-1] if stack else None

        if _RE_SYNTAX.match(code):
            proto.header = [line for line in comment if not _RE_BANNER.match(line)]
            continue
        if m := _RE_PACKAGE.match(code):
            proto.package = m.group(1)
            continue
        if _RE_OPTION.match(code) or _RE_IMPORT.match(code):
            continue
        if code == "}":
            if not stack:
                fail(lineno, "unbalanced '}'")
            stack.pop()
            continue
        if m := _RE_OPEN.match(code):
            kind, name = m.group(1), m.group(2)
            if kind == "oneof":
                if not isinstance(top, Message):
                    fail(lineno, "oneof outside a message")
                stack.append(("oneof", name, top))
                continue
            if kind == "service":
                if stack:
                    fail(lineno, "service inside another block")
                element = Service(name, comment)
            else:
                if isinstance(top, Message):
                    name = f"{top.name}.{name}"
                elif stack:
                    fail(lineno, f"{kind} {name} inside a {type(top).__name__.lower()}")
                element = Message(name, comment) if kind == "message" else Enum(name, comment)
            proto.sections[-1].elements.append(element)
            stack.append(element)
            continue
        if isinstance(top, Service):
            m = _RE_RPC.match(code)
            if not m:
                fail(lineno, f"cannot parse in service {top.name}: {code}")
            top.rpcs.append(Rpc(m.group(1), m.group(3), bool(m.group(2)), m.group(5),
                                bool(m.group(4)), comment))
            continue
        if isinstance(top, Enum):
            m = _RE_ENUM_VALUE.match(code)
            if not m:
                fail(lineno, f"cannot parse in enum {top.name}: {code}")
            top.values.append(EnumValue(m.group(1), int(m.group(2)), comment))
            continue
        if isinstance(top, Message) or isinstance(top, tuple):
            message = top if isinstance(top, Message) else top[2]
            oneof = top[1] if isinstance(top, tuple) else ""
            if m := _RE_MAP.match(code):
                message.fields.append(Field(m.group(3), int(m.group(4)),
                                            f"{m.group(1)},{m.group(2)}", "map", comment, oneof))
                continue
            if m := _RE_FIELD.match(code):
                label = (m.group(1) or "").strip()
                message.fields.append(Field(m.group(3), int(m.group(4)), m.group(2), label,
                                            comment, oneof))
                continue
            fail(lineno, f"cannot parse in message {message.name}: {code}")
        fail(lineno, f"cannot parse: {code}")
    if stack:
        fail(len(text.splitlines()), "unclosed block at end of file")
    return _with_sections(proto, text)


def _with_sections(proto: ProtoFile, text: str) -> ProtoFile:
    """Moves elements under the banner titles ("// ---" / "// Title" / "// ---")."""
    titles = []  # (line number of the title, title)
    lines = text.splitlines()
    for i in range(len(lines) - 2):
        a, b, c = (line.strip() for line in lines[i:i + 3])
        if (a.startswith("//") and c.startswith("//") and b.startswith("//")
                and _RE_BANNER.match(_comment_text(a)) and _RE_BANNER.match(_comment_text(c))):
            titles.append((i + 2, _comment_text(b).strip()))
    if not titles:
        return proto
    # Element order is file order; find each element's line to place it.
    positions = []
    for element in proto.sections[0].elements:
        short = element.name.split(".")[-1]
        kind = {Service: "service", Message: "message", Enum: "enum"}[type(element)]
        pattern = re.compile(rf"^\s*{kind}\s+{short}\s*\{{")
        start = positions[-1][0] if positions else 0
        line = next(n for n in range(start, len(lines)) if pattern.match(lines[n]))
        positions.append((line, element))
    sections = [Section("")]
    for line, element in positions:
        while titles and titles[0][0] <= line:
            sections.append(Section(titles.pop(0)[1]))
        sections[-1].elements.append(element)
    proto.sections = [s for s in sections if s.elements]
    return proto


# ---------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------

SCALARS = {"double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
           "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes"}


def anchor(element) -> str:
    """GitHub's anchor for the element's heading ("`Name` (kind)")."""
    kind = {Service: "service", Message: "message", Enum: "enum"}[type(element)]
    return re.sub(r"[^a-z0-9_ -]", "", f"{element.name} {kind}".lower()).replace(" ", "-")


def heading(element) -> str:
    kind = {Service: "service", Message: "message", Enum: "enum"}[type(element)]
    return f"`{element.name}` ({kind})"


def one_line(comment: List[str]) -> str:
    text = " ".join(line.strip() for line in comment).strip()
    return text.replace("|", "\\|") if text else "—"


def paragraph(comment: List[str]) -> List[str]:
    return [line.rstrip() for line in comment] + [""] if comment else []


class Renderer:
    def __init__(self, protos: List[ProtoFile]):
        self.protos = protos

    def type_ref(self, proto: ProtoFile, name: str) -> str:
        if name in SCALARS:
            return f"`{name}`"
        local = name[len(proto.package) + 1:] if name.startswith(proto.package + ".") else name
        for section in proto.sections:
            for element in section.elements:
                if element.name == local or element.name.endswith("." + local):
                    return f"[{local}](#{anchor(element)})"
        return f"`{name}`"

    def field_type(self, proto: ProtoFile, field: Field) -> str:
        if field.label == "map":
            key, value = field.type.split(",")
            return f"map from {self.type_ref(proto, key)} to {self.type_ref(proto, value)}"
        prefix = f"{field.label} " if field.label else ""
        return prefix + self.type_ref(proto, field.type)

    def element(self, proto: ProtoFile, element) -> List[str]:
        out = [f"#### {heading(element)}", ""] + paragraph(element.comment)
        if isinstance(element, Service):
            out += ["| rpc | request | response | description |", "|---|---|---|---|"]
            for rpc in element.rpcs:
                request = ("stream " if rpc.request_stream else "") + self.type_ref(proto, rpc.request)
                response = ("stream " if rpc.response_stream else "") + self.type_ref(proto, rpc.response)
                method = f"{proto.package}.{element.name}/{rpc.name}"
                out.append(f"| `{rpc.name}`<br>`{method}` | {request} | {response} | "
                           f"{one_line(rpc.comment)} |")
        elif isinstance(element, Message):
            if element.fields:
                out += ["| field | number | type | description |", "|---|---|---|---|"]
                for field in element.fields:
                    description = one_line(field.comment)
                    if field.oneof:
                        description = (f"One of `{field.oneof}`." if description == "—"
                                       else f"One of `{field.oneof}`. {description}")
                    out.append(f"| `{field.name}` | {field.number} | "
                               f"{self.field_type(proto, field)} | {description} |")
            else:
                out.append("No fields.")
        else:
            out += ["| value | number | description |", "|---|---|---|"]
            for value in element.values:
                out.append(f"| `{value.name}` | {value.number} | {one_line(value.comment)} |")
        return out + [""]

    def render(self) -> str:
        out = [
            "# gRPC API reference",
            "",
            "<!-- Generated by tools/gen_api_doc.py from the comments in "
            + " and ".join(p.path for p in self.protos)
            + ". Do not edit by hand: change the .proto comments, then run"
            " /usr/bin/python3 tools/gen_api_doc.py -->",
            "",
        ]
        out += INTRO.splitlines() + [""]
        out += ["## Contents", ""]
        for proto in self.protos:
            out.append(f"- [`{proto.package}`](#{proto.package.replace('.', '')}) "
                       f"(`{proto.path}`)")
            for section in proto.sections:
                names = ", ".join(f"[{e.name}](#{anchor(e)})" for e in section.elements)
                title = section.title or "definitions"
                out.append(f"  - {title}: {names}")
        out.append("")
        for proto in self.protos:
            out += [f"## {proto.package}", "", f"From `{proto.path}`.", ""]
            out += paragraph(proto.header)
            for section in proto.sections:
                if section.title:
                    out += [f"### {section.title}", ""]
                for element in section.elements:
                    out += self.element(proto, element)
        while out and out[-1] == "":
            out.pop()
        return "\n".join(out) + "\n"


INTRO = """\
torchmond serves two services of its own, `torchmon.v1.Ingest` (training
processes send samples and events) and `torchmon.v1.Query` (series, closed
windows, events), plus the standard `grpc.health.v1.Health` and server
reflection (`grpc.reflection.v1alpha`) on every listener. Everything below
the "Contents" comes from the comments in the `.proto` files, which are the
contract: a client written from them alone must interoperate. Semantics in
prose (windows, caps, NaN, late and skewed samples, accounting):
[semantics](semantics.md); limits and delivery: [reliability](reliability.md).

## Calling it

**Addresses.** torchmond listens on what `--listen` says (repeatable), by
default the Unix socket `$XDG_RUNTIME_DIR/torchmon/torchmond.sock` if
`XDG_RUNTIME_DIR` is set, else `/run/torchmon/torchmond.sock` for root and
`/tmp/torchmon-<uid>/torchmond.sock` for other users (the clients look in the
same place, `torchmon/protocol/protocol.h`).
gRPC clients (C++, Python `grpc.insecure_channel`, the torchmon clients'
`TORCHMON_TARGET` and `torchmonctl --target`) name a Unix socket with the
gRPC target syntax `unix:///abs/path/torchmond.sock` (`unix:` plus an absolute
path: three slashes) and TCP as `host:port`. TCP listeners bind loopback
unless given a host. grpcurl takes the socket path with `-unix`:

```sh
sock=/run/torchmon/torchmond.sock
grpcurl -plaintext -unix $sock list
grpcurl -plaintext -unix -d '{"selector": {"stat": "train.*"}}' $sock torchmon.v1.Query/ListSeries
grpcurl -plaintext -unix -d '{"selector": {"stat": "train.loss"}, "limit_per_series": 5}' \\
    $sock torchmon.v1.Query/GetWindows
```

JSON follows protobuf's mapping: field names as below or in lowerCamelCase,
64-bit integers as strings, enums by name (`"MEAN"`). More (grpcui, health
probes, TLS): [grpc-tooling](grpc-tooling.md).

**Credentials.** With `--auth-token-file` every call, reflection and health
included, carries the metadata `authorization: Bearer <token>`; with
`--tls-cert` the listener speaks TLS only, and with `--tls-client-ca` it
wants a client certificate ([security](security.md)).

**Sending data.** Training code uses the client libraries (C++
`torchmon::Client`, Python `torchmon`: [python](python.md)), which implement
`Ingest.Stream` with batching, acknowledgements and re-sending. A client of
its own opens `Ingest/Stream`, sends a first batch with sequence 0 carrying
`hello` and its `definitions`, then batches with increasing sequence numbers
carrying `samples` (packed per stat), `drops` and `events`, and keeps each
batch until an `IngestAck` covers it. `torchmonctl push` and `event` do this
for one batch from a shell ([cli](cli.md))."""


def generate(repo: str = REPO) -> str:
    """The full text of docs/api.md for the .proto files under `repo`."""
    protos = []
    for path in PROTOS:
        with open(os.path.join(repo, path), encoding="utf-8") as f:
            protos.append(parse_proto(path, f.read()))
    return Renderer(protos).render()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help=f"compare with {OUTPUT} instead of writing it; exit 1 if it differs")
    args = parser.parse_args(argv)
    try:
        text = generate()
    except ValueError as e:
        print(f"gen_api_doc: {e}", file=sys.stderr)
        return 2
    target = os.path.join(REPO, OUTPUT)
    if args.check:
        try:
            with open(target, encoding="utf-8") as f:
                current = f.read()
        except FileNotFoundError:
            current = None
        if current != text:
            print(f"{OUTPUT} is out of date: run /usr/bin/python3 tools/gen_api_doc.py",
                  file=sys.stderr)
            return 1
        return 0
    with open(target, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
