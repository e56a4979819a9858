"""gguf.py: a minimal GGUF v3 writer (F32 tensors, scalar/array metadata),
the Python twin of tests/support/gguf_writer.h, for tools that train models."""

import struct

_U32, _I32, _F32, _BOOL, _STR, _ARR = 4, 5, 6, 7, 8, 9


def _s(b, text):
    raw = text.encode("utf-8")
    b += struct.pack("<Q", len(raw)) + raw


class Writer:
    def __init__(self):
        self.kv = bytearray()
        self.info = bytearray()
        self.data = bytearray()
        self.n_kv = 0
        self.n_tensors = 0

    def _key(self, k, t):
        _s(self.kv, k)
        self.kv += struct.pack("<I", t)
        self.n_kv += 1

    def u32(self, k, v):
        self._key(k, _U32)
        self.kv += struct.pack("<I", v)

    def f32(self, k, v):
        self._key(k, _F32)
        self.kv += struct.pack("<f", v)

    def string(self, k, v):
        self._key(k, _STR)
        _s(self.kv, v)

    def strings(self, k, vs):
        self._key(k, _ARR)
        self.kv += struct.pack("<IQ", _STR, len(vs))
        for v in vs:
            _s(self.kv, v)

    def f32s(self, k, vs):
        self._key(k, _ARR)
        self.kv += struct.pack("<IQ", _F32, len(vs)) + struct.pack("<%df" % len(vs), *vs)

    def i32s(self, k, vs):
        self._key(k, _ARR)
        self.kv += struct.pack("<IQ", _I32, len(vs)) + struct.pack("<%di" % len(vs), *vs)

    def tensor(self, name, array):
        """`array`: a C-contiguous float32 numpy array, shape in row-major
        order (ggml's dims are the reverse)."""
        _s(self.info, name)
        self.info += struct.pack("<I", array.ndim)
        for d in reversed(array.shape):
            self.info += struct.pack("<Q", d)
        while len(self.data) % 32:
            self.data += b"\0"
        self.info += struct.pack("<IQ", 0, len(self.data))
        self.data += array.astype("<f4").tobytes()
        self.n_tensors += 1

    def write(self, path):
        out = bytearray(b"GGUF") + struct.pack("<IQQ", 3, self.n_tensors, self.n_kv)
        out += self.kv + self.info
        while len(out) % 32:
            out += b"\0"
        out += self.data
        with open(path, "wb") as f:
            f.write(out)
