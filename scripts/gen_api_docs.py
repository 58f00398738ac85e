"""Generate ``docs/api.md``, the gRPC API reference, from the comments of ``proto/rlmm/v1/*.proto``.

    python scripts/gen_api_docs.py           # rewrite docs/api.md
    python scripts/gen_api_docs.py --check   # exit 1 when docs/api.md differs from a fresh generation

protoc (grpcio-tools') compiles the protos into a FileDescriptorSet with ``--include_source_info``: every
comment comes from its SourceCodeInfo, attached to the service, method, message, field, enum or value it
documents. The output depends on the protos alone (declaration order, no dates), but for the hand-written
part at the end of docs/api.md, after ``HAND_WRITTEN``: a generation keeps it as it is.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts.generated_doc import ROOT, write_or_check  # noqa: E402

PROTO_ROOT = ROOT / "proto"
OUT = ROOT / "docs" / "api.md"
# the line after which docs/api.md is written by hand (clients in other languages), kept by every generation
HAND_WRITTEN = "<!-- Written by hand from here on: scripts/gen_api_docs.py keeps it as it is. -->"

# SourceCodeInfo paths: field numbers of FileDescriptorProto, DescriptorProto, ...
_MESSAGE, _ENUM, _SERVICE, _SYNTAX = 4, 5, 6, 12
_FIELD, _NESTED, _NESTED_ENUM, _ONEOF, _VALUE, _METHOD = 2, 3, 4, 8, 2, 2
_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    getattr(_F, name): name.removeprefix("TYPE_").lower()
    for name in _F.Type.keys()
    if name not in ("TYPE_MESSAGE", "TYPE_ENUM", "TYPE_GROUP")
}


def descriptors() -> list[descriptor_pb2.FileDescriptorProto]:
    """The protos under ``proto/``, compiled with their comments, in file-name order."""
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "api.pb"
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{files('grpc_tools') / '_proto'}",
            "--include_source_info",
            f"--descriptor_set_out={out}",
            *protos,
        ]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on {protos}")
        return list(descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file)


@dataclass(frozen=True)
class Comments:
    """The comments of one proto file, by SourceCodeInfo path."""

    by_path: dict[tuple[int, ...], str]

    @classmethod
    def of(cls, file: descriptor_pb2.FileDescriptorProto) -> Comments:
        by_path = {}
        for location in file.source_code_info.location:
            text = "\n".join(p for p in (location.leading_comments, location.trailing_comments) if p.strip())
            if text:
                by_path[tuple(location.path)] = _dedent(text)
        return cls(by_path)

    def __call__(self, *path: int) -> str:
        return self.by_path.get(path, "")


def _dedent(text: str) -> str:
    """A ``//`` comment's text: the one space after ``//`` dropped, deeper indentation kept."""
    lines = [line[1:] if line.startswith(" ") else line for line in text.strip("\n").split("\n")]
    return "\n".join(line.rstrip() for line in lines).strip()


def one_line(text: str) -> str:
    """A comment as one table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def messages(
    file: descriptor_pb2.FileDescriptorProto,
) -> Iterator[tuple[descriptor_pb2.DescriptorProto, tuple[int, ...], str]]:
    """Every message of the file, nested ones after their parent, with its path and full name; map entries
    are left out (they show as ``map<K, V>`` fields)."""

    def walk(message: descriptor_pb2.DescriptorProto, path: tuple[int, ...], prefix: str):
        if message.options.map_entry:
            return
        name = f"{prefix}.{message.name}"
        yield message, path, name
        for i, nested in enumerate(message.nested_type):
            yield from walk(nested, (*path, _NESTED, i), name)

    for i, message in enumerate(file.message_type):
        yield from walk(message, (_MESSAGE, i), file.package)


def enums(
    file: descriptor_pb2.FileDescriptorProto,
) -> Iterator[tuple[descriptor_pb2.EnumDescriptorProto, tuple[int, ...], str]]:
    for message, path, name in messages(file):
        for i, enum in enumerate(message.enum_type):
            yield enum, (*path, _NESTED_ENUM, i), f"{name}.{enum.name}"
    for i, enum in enumerate(file.enum_type):
        yield enum, (_ENUM, i), f"{file.package}.{enum.name}"


_KINDS = {
    (False, False): "unary",
    (False, True): "server streaming",
    (True, False): "client streaming",
    (True, True): "bidirectional streaming",
}


def _stream(flag: bool) -> str:
    return "stream " if flag else ""


def _anchor(text: str) -> str:
    """GitHub's heading anchor for plain words: lower case, dots and spaces dropped or turned into dashes."""
    return "".join(c for c in text.lower().replace(" ", "-") if c.isalnum() or c in "-_")


def _short(name: str, file: descriptor_pb2.FileDescriptorProto) -> str:
    return name.removeprefix(file.package + ".")


class Renderer:
    """The Markdown reference of a set of compiled proto files."""

    def __init__(self, files_: list[descriptor_pb2.FileDescriptorProto]) -> None:
        self.files = files_
        self.maps = {
            f".{name}.{nested.name}": nested
            for file in files_
            for message, _, name in messages(file)
            for nested in message.nested_type
            if nested.options.map_entry
        }
        self.anchors = {
            f".{name}": f"message-{_anchor(_short(name, file))}" for file in files_ for _, _, name in messages(file)
        }
        self.anchors.update(
            {f".{name}": f"enum-{_anchor(_short(name, file))}" for file in files_ for _, _, name in enums(file)}
        )

    def type_link(self, type_name: str) -> str:
        short = type_name.rsplit(".", 1)[-1]
        anchor = self.anchors.get(type_name)
        return f"[`{short}`](#{anchor})" if anchor else f"`{type_name.lstrip('.')}`"

    def field_type(self, field: descriptor_pb2.FieldDescriptorProto) -> str:
        if field.type_name in self.maps:
            key, value = self.maps[field.type_name].field
            return f"`map<{self._plain(key)}, {self._plain(value)}>`"
        if field.type in (_F.TYPE_MESSAGE, _F.TYPE_ENUM):
            return self.type_link(field.type_name)
        return f"`{_SCALARS[field.type]}`"

    def _plain(self, field: descriptor_pb2.FieldDescriptorProto) -> str:
        return field.type_name.rsplit(".", 1)[-1] if field.type_name else _SCALARS[field.type]

    def label(self, message: descriptor_pb2.DescriptorProto, field: descriptor_pb2.FieldDescriptorProto) -> str:
        if field.type_name in self.maps:
            return "map"
        if field.label == _F.LABEL_REPEATED:
            return "repeated"
        if field.proto3_optional:
            return "optional"
        if field.HasField("oneof_index"):
            return f"oneof `{message.oneof_decl[field.oneof_index].name}`"
        return ""

    def render(self) -> str:
        out = [
            "# rlmm gRPC API reference",
            "",
            "Generated from the comments of `proto/rlmm/v1/*.proto` by `python scripts/gen_api_docs.py`: edit "
            "the protos, not this file (`python scripts/gen_api_docs.py --check` fails when it is stale).",
            "",
            "A field's *label* is `repeated`, `map`, `optional` (proto3 explicit presence: unset differs from "
            "zero) or the `oneof` it belongs to; fields without a label are plain proto3 fields (unset reads "
            "as zero).",
            "",
            "Calling the service from other languages (Node with `@grpc/grpc-js`, Go's `grpcurl`, no generated "
            "code): [Clients in other languages](#clients-in-other-languages), at the end.",
            "",
        ]
        ordered = sorted(self.files, key=lambda f: (not f.service, f.name))  # the service first
        out += ["Contents:", ""]
        for file in ordered:
            for service in file.service:
                out.append(f"- service [`{file.package}.{service.name}`](#service-{_anchor(service.name)})")
            out.append(f"- [`{file.name}`](#{_anchor(file.name)}): messages and enums")
        out.append("")
        for file in ordered:
            out += self.file_section(file)
        return "\n".join(out).rstrip("\n") + "\n"

    def file_section(self, file: descriptor_pb2.FileDescriptorProto) -> list[str]:
        comments = Comments.of(file)
        out = []
        for s, service in enumerate(file.service):
            out += self.service_section(file, comments, s, service)
        out += [f"## `{file.name}`", ""]
        if not file.service and comments(_SYNTAX):
            out += [comments(_SYNTAX), ""]
        for message, path, name in messages(file):
            out += self.message_section(comments, message, path, _short(name, file))
        for enum, path, name in enums(file):
            out += self.enum_section(comments, enum, path, _short(name, file))
        return out

    def service_section(
        self,
        file: descriptor_pb2.FileDescriptorProto,
        comments: Comments,
        s: int,
        service: descriptor_pb2.ServiceDescriptorProto,
    ) -> list[str]:
        out = [f"## service `{service.name}`", "", f"`{file.package}.{service.name}`, in `{file.name}`.", ""]
        for text in (comments(_SYNTAX), comments(_SERVICE, s)):  # the file's comment documents its service
            if text:
                out += [text, ""]
        out += ["| method | request | response |", "| --- | --- | --- |"]
        for method in service.method:
            out.append(
                f"| [`{method.name}`](#rpc-{_anchor(method.name)}) | "
                f"{_stream(method.client_streaming)}{self.type_link(method.input_type)} | "
                f"{_stream(method.server_streaming)}{self.type_link(method.output_type)} |"
            )
        out.append("")
        for m, method in enumerate(service.method):
            out += [
                f"### rpc `{method.name}`",
                "",
                f"{self.type_link(method.input_type)} → {self.type_link(method.output_type)}, "
                f"{_KINDS[method.client_streaming, method.server_streaming]}.",
                "",
            ]
            if comments(_SERVICE, s, _METHOD, m):
                out += [comments(_SERVICE, s, _METHOD, m), ""]
        return out

    def message_section(
        self, comments: Comments, message: descriptor_pb2.DescriptorProto, path: tuple[int, ...], name: str
    ) -> list[str]:
        out = [f"### message `{name}`", ""]
        if comments(*path):
            out += [comments(*path), ""]
        if not message.field:
            return [*out, "No fields.", ""]
        out += ["| field | # | type | label | description |", "| --- | --- | --- | --- | --- |"]
        for f, field in enumerate(message.field):
            out.append(
                f"| `{field.name}` | {field.number} | {self.field_type(field)} | "
                f"{self.label(message, field)} | {one_line(comments(*path, _FIELD, f))} |"
            )
        out.append("")
        for o, oneof in enumerate(message.oneof_decl):
            if comments(*path, _ONEOF, o):
                out += [f"oneof `{oneof.name}`: {one_line(comments(*path, _ONEOF, o))}", ""]
        return out

    @staticmethod
    def enum_section(
        comments: Comments, enum: descriptor_pb2.EnumDescriptorProto, path: tuple[int, ...], name: str
    ) -> list[str]:
        out = [f"### enum `{name}`", ""]
        if comments(*path):
            out += [comments(*path), ""]
        out += ["| value | # | description |", "| --- | --- | --- |"]
        for v, value in enumerate(enum.value):
            out.append(f"| `{value.name}` | {value.number} | {one_line(comments(*path, _VALUE, v))} |")
        return [*out, ""]


def render() -> str:
    """The reference generated from the protos, then the hand-written part of the current docs/api.md."""
    current = OUT.read_text() if OUT.is_file() else ""
    _, marker, by_hand = current.partition(HAND_WRITTEN)
    return Renderer(descriptors()).render() + (f"\n{marker}{by_hand}" if marker else "")


def main(argv: list[str] | None = None) -> int:
    return write_or_check(__file__, OUT, render, argv)


if __name__ == "__main__":
    sys.exit(main())
