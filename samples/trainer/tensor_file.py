"""The trainer's tensor file (see tensor_file.hpp for the layout), for Python.

read(path) -> {name: (dtype, shape, bytes)}; write(path, [(name, dtype, shape, bytes)]).
dtype is 'float32', 'int64' or 'float64'. Standard library only, so that the
exporter needs numpy only to call scikit-learn and torch_ddp.py only torch."""
import os
import struct

MAGIC = b"PLXTENS1"
CODES = {"float32": 0, "int64": 1, "float64": 2}
NAMES = {v: k for k, v in CODES.items()}
SIZES = {"float32": 4, "int64": 8, "float64": 8}


def write(path, arrays):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(MAGIC + struct.pack("<I", len(arrays)))
        for name, dtype, shape, data in arrays:
            n = name.encode()
            count = 1
            for d in shape:
                count *= d
            if len(data) != count * SIZES[dtype]:
                raise ValueError(f"{name}: {len(data)} bytes for shape {shape} of {dtype}")
            f.write(struct.pack("<I", len(n)) + n)
            f.write(struct.pack("<II", CODES[dtype], len(shape)))
            f.write(struct.pack(f"<{len(shape)}q", *shape))
            f.write(struct.pack("<Q", len(data)) + data)
    os.replace(tmp, path)


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    if blob[:8] != MAGIC:
        raise ValueError(f"{path}: not a trainer tensor file")
    (count,) = struct.unpack_from("<I", blob, 8)
    pos, out = 12, {}
    for _ in range(count):
        (nlen,) = struct.unpack_from("<I", blob, pos)
        pos += 4
        name = blob[pos:pos + nlen].decode()
        pos += nlen
        code, ndim = struct.unpack_from("<II", blob, pos)
        pos += 8
        shape = list(struct.unpack_from(f"<{ndim}q", blob, pos))
        pos += 8 * ndim
        (nbytes,) = struct.unpack_from("<Q", blob, pos)
        pos += 8
        out[name] = (NAMES[code], shape, blob[pos:pos + nbytes])
        pos += nbytes
    return out
