#!/usr/bin/env python3
"""Prints the top-level imports and exports of WebAssembly components.

    guests/tools/component-imports.py target/guests/*.wasm

What the host must provide to a guest is exactly its top-level import list, so this is the
quick check that a guest imports what its world allows and nothing else (e.g. a `controller`
guest must not import `network-backend`). A few dozen lines of the component binary format
(https://github.com/WebAssembly/component-model/blob/main/design/mvp/Binary.md) instead of
building wasm-tools, which takes minutes here; `wasm-tools component wit` gives the full picture.
"""
import sys

IMPORT_SECTION, EXPORT_SECTION = 10, 11
KINDS = {0x01: "func", 0x02: "value", 0x03: "type", 0x04: "component", 0x05: "instance"}


class Reader:
    def __init__(self, data, pos=0):
        self.data, self.pos = data, pos

    def byte(self):
        b = self.data[self.pos]
        self.pos += 1
        return b

    def uleb(self):
        result = shift = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return result

    def string(self):
        n = self.uleb()
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def name(self):
        tag = self.byte()
        name = self.string()
        if tag == 0x02:  # name with options (implements, version suffix, external id)
            for _ in range(self.uleb()):
                self.byte()
                self.string()
        return name

    def externdesc(self):
        kind = self.byte()
        if kind == 0x00:  # core module: 0x00 0x11 typeidx
            self.byte()
            self.uleb()
            return "module"
        if kind == 0x03:  # type bound: eq idx | sub resource
            if self.byte() == 0x00:
                self.uleb()
        else:  # func/component/instance: typeidx; value: valtype (primitive byte or typeidx)
            self.uleb()
        return KINDS.get(kind, f"kind {kind:#x}")


def sections(data):
    if data[:4] != b"\0asm" or data[4:8] != b"\x0d\x00\x01\x00":
        raise ValueError("not a WebAssembly component (a core module, or another binary)")
    r = Reader(data, 8)
    while r.pos < len(data):
        sid, size = r.byte(), r.uleb()
        yield sid, Reader(data[r.pos:r.pos + size])
        r.pos += size


def describe(path):
    with open(path, "rb") as f:
        data = f.read()
    imports, exports = [], []
    for sid, r in sections(data):
        if sid == IMPORT_SECTION:
            for _ in range(r.uleb()):
                imports.append((r.name(), r.externdesc()))
        elif sid == EXPORT_SECTION:
            for _ in range(r.uleb()):
                name = r.name()
                if r.byte() == 0x00:  # core sort
                    r.byte()
                r.uleb()  # index
                if r.byte() == 0x01:  # optional ascribed type
                    r.externdesc()
                exports.append(name)
    return imports, exports


def main(paths):
    status = 0
    for path in paths:
        try:
            imports, exports = describe(path)
        except (ValueError, IndexError, UnicodeDecodeError, OSError) as e:
            print(f"{path}: cannot read: {e}", file=sys.stderr)
            status = 1
            continue
        print(path)
        for name, kind in imports:
            print(f"  import {kind} {name}")
        for name in exports:
            print(f"  export {name}")
    return status


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
