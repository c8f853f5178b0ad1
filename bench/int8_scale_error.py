#!/usr/bin/env python3
"""Relative RMS error of the INT8 exchange's rounding, per scale scheme.

Reads a DiLoCo worker checkpoint (docs/training.md, "Checkpoint format")
and takes its outer momentum (a sum of all-reduced pseudo-gradients), or
reads two checkpoints of one run and takes the difference of their
parameters (a pseudo-gradient: what the steps between them did), and
rounds it to int8 codes under one scale per block of B values, the scale
being the
block's max-abs / 127 exactly, rounded up to a power of two, or rounded to
8 significant bits (what the wire uses: worker/exchange/int8_codec.h).
Prints ||x - Q(x)|| / ||x|| for each. docs/benchmarks.md, "INT8 exchange".

Usage: bench/int8_scale_error.py CHECKPOINT          (its outer.momentum)
       bench/int8_scale_error.py EARLIER.ckpt LATER.ckpt   (LATER - EARLIER)
"""
import math
import struct
import sys
from array import array


def read_checkpoint(path):
    data = open(path, "rb").read()
    if data[:8] != b"GASLOCKP":
        sys.exit(f"{path}: not a gasloc checkpoint")
    return data, struct.unpack_from("<Q", data, 48)[0]


def read_params(path):
    data, floats = read_checkpoint(path)
    values = array("f")
    values.frombytes(data[80:80 + 4 * floats])
    return list(values)


def read_buffer(path, name):
    data, floats = read_checkpoint(path)
    offset = 80 + 12 * floats  # after parameters, AdamW m and v
    count = struct.unpack_from("<I", data, offset)[0]
    offset += 4
    for _ in range(count):
        length = struct.unpack_from("<I", data, offset)[0]
        offset += 4
        buffer_name = data[offset:offset + length].decode()
        offset += length
        n = struct.unpack_from("<Q", data, offset)[0]
        offset += 8
        if buffer_name == name:
            values = array("f")
            values.frombytes(data[offset:offset + 4 * n])
            return list(values)
        offset += 4 * n
    sys.exit(f"{path}: no buffer {name}")


def scale_of(max_abs, scheme):
    scale = max_abs / 127
    if scheme == "power of two":
        return 2.0 ** math.ceil(math.log2(scale))
    if scheme == "8 bits":
        f, e = math.frexp(scale)
        return math.ldexp(round(math.ldexp(f, 8)), e - 8)
    return scale


def squared_error(values, block, scheme):
    total = 0.0
    for begin in range(0, len(values), block):
        chunk = values[begin:begin + block]
        max_abs = max(abs(v) for v in chunk)
        if max_abs == 0:
            continue
        scale = scale_of(max_abs, scheme)
        for v in chunk:
            q = max(-127, min(127, round(v / scale)))
            total += (v - q * scale) ** 2
    return total


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if len(sys.argv) > 2:
        earlier, later = read_params(sys.argv[1]), read_params(sys.argv[2])
        values = [b - a for a, b in zip(earlier, later)]
    else:
        values = read_buffer(sys.argv[1], "outer.momentum")
    norm = sum(v * v for v in values)
    print(f"{len(values)} values, rms {math.sqrt(norm / len(values)):.3g}")
    print("| block | max-abs / 127 | power of two | 8 bits (the wire) |")
    print("| --- | --- | --- | --- |")
    for block in (1032192, 16128, 1024, 256, 64):
        row = [f"{math.sqrt(squared_error(values, block, s) / norm):.4f}"
               for s in ("exact", "power of two", "8 bits")]
        print(f"| {block} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
