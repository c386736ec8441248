#!/usr/bin/env python3
"""An independent reader of TensorBoard events files (no TensorFlow or TensorBoard needed).

Checks the TFRecord framing of every events.out.tfevents.* file under RUN_DIR (uint64
length, masked CRC32C of it, data, masked CRC32C of the data), decodes each Event by hand
from the protobuf wire format (wall_time 1, step 2, file_version 3, summary 5 -> value 1 ->
tag 1, simple_value 2), and, given METRICS (a metrics.jsonl), checks that every scalar of
its step and epoch records is in the events at the same step. Exit 1 on any mismatch.

    read_tensorboard.py RUN_DIR [METRICS]
"""
import glob
import json
import math
import os
import struct
import sys

from pbwire import varint


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fields(buf):
    """(field number, wire type, value) of a protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt}")
        yield num, wt, v


def events(path):
    data = open(path, "rb").read()
    i, n = 0, 0
    while i < len(data):
        if i + 12 > len(data):
            raise ValueError(f"{path}: truncated record header at byte {i}")
        (length,) = struct.unpack_from("<Q", data, i)
        (len_crc,) = struct.unpack_from("<I", data, i + 8)
        if masked(data[i:i + 8]) != len_crc:
            raise ValueError(f"{path}: record {n}: length CRC mismatch")
        body = data[i + 12:i + 12 + length]
        (body_crc,) = struct.unpack_from("<I", data, i + 12 + length)
        if masked(body) != body_crc:
            raise ValueError(f"{path}: record {n}: data CRC mismatch")
        i += 12 + length + 4
        n += 1
        ev = {"scalars": []}
        for num, wt, v in fields(body):
            if num == 1:
                ev["wall_time"] = struct.unpack("<d", v)[0]
            elif num == 2:
                ev["step"] = v
            elif num == 3:
                ev["file_version"] = v.decode()
            elif num == 5:
                for vn, _, val in fields(v):
                    if vn != 1:
                        continue
                    tag, simple = None, 0.0  # proto3: a zero value is not written
                    for fn, _, fv in fields(val):
                        if fn == 1:
                            tag = fv.decode()
                        elif fn == 2:
                            simple = struct.unpack("<f", fv)[0]
                    ev["scalars"].append((tag, simple))
        yield ev


def main():
    run_dir = sys.argv[1]
    files = sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*")))
    if not files:
        print(f"no events files under {run_dir}")
        return 1
    scalars = {}  # (tag, step) -> value
    records = 0
    for f in files:
        evs = list(events(f))
        records += len(evs)
        if evs[0].get("file_version") != "brain.Event:2":
            print(f"{f}: the first event is not file_version brain.Event:2")
            return 1
        for ev in evs[1:]:
            for tag, v in ev["scalars"]:
                scalars[(tag, ev.get("step", 0))] = v
    print(f"{len(files)} file(s), {records} records, every CRC good, {len(scalars)} scalars")
    if len(sys.argv) < 3:
        return 0
    want = {"step": {"loss": "train/loss", "lr": "train/lr", "images_per_s": "train/images_per_s"},
            "epoch": {"train_loss": "train/epoch_loss", "val_loss": "val/loss", "val_accuracy": "val/accuracy"}}
    checked = 0
    for line in open(sys.argv[2]):
        r = json.loads(line)
        for key, tag in want.get(r.get("type"), {}).items():
            got = scalars.get((tag, r.get("step", 0)))
            if got is None or not math.isclose(got, r[key], rel_tol=1e-6, abs_tol=1e-12):
                print(f"{tag} at step {r.get('step')}: events {got}, metrics.jsonl {r[key]}")
                return 1
            checked += 1
    if checked == 0:
        print("metrics.jsonl has no step or epoch scalars")
        return 1
    print(f"{checked} scalars of metrics.jsonl found in the events, equal to float32 precision")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
