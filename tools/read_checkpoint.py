#!/usr/bin/env python3
"""A reference reader of booster-cpp checkpoints (format 2), written from
docs/checkpoint_format.md alone: Python's protobuf bindings generated from
proto/checkpoint.proto at run time (protoc), XXH3-64 from python3-xxhash.

Reads a checkpoint (a sharded folder with <prefix><kind>.index, or one file) and checks the
magic, every length-delimited message, every record against its index entry (name, dtype,
shape, box, range, size) and every XXH3-64 checksum (the records', and the Seal after each
index, scheduler state and training progress), and that the records of each tensor cover
all of its elements. A step folder of vit_train (model/, optimizer/, scheduler.ckpt,
progress.ckpt, and the files whose checksums the progress holds) is read whole. Exit 1 on
any problem, naming it.

    /usr/bin/python3 read_checkpoint.py CHECKPOINT [--proto DIR_OF_checkpoint.proto]
"""
import glob
import importlib
import os
import subprocess
import sys
import tempfile

from pbwire import varint

import xxhash

MAGIC = b"BSTCKPT1"
SEAL_MARKER = "booster.seal"
DTYPE_BYTES = {0: 4, 1: 2, 2: 2, 3: 8, 4: 1, 5: 4}  # F32 BF16 F16 I64 U8 I32


def bindings(proto_dir):
    out = tempfile.mkdtemp(prefix="booster_pb_")
    subprocess.run(["protoc", f"--proto_path={proto_dir}", f"--python_out={out}",
                    os.path.join(proto_dir, "checkpoint.proto")], check=True)
    sys.path.insert(0, out)
    return importlib.import_module("checkpoint_pb2")


class Container:
    """A container file: the magic, then varint-length-prefixed messages."""

    def __init__(self, path):
        self.path = path
        self.data = open(path, "rb").read()
        if self.data[:8] != MAGIC:
            raise ValueError(f"{path}: not a booster checkpoint (magic {self.data[:8]!r})")

    def message_at(self, offset, cls):
        n, i = varint(self.data, offset)
        if i + n > len(self.data):
            raise ValueError(f"{self.path}: message at byte {offset} runs past the end")
        m = cls()
        m.ParseFromString(self.data[i:i + n])
        return m, i + n

    def messages(self, cls_first, cls_rest):
        i, out = 8, []
        while i < len(self.data):
            m, i = self.message_at(i, cls_first if not out else cls_rest)
            out.append(m)
        return out


def sealed_at(pb, c, offset, cls):
    """The message at offset, checked against the Seal after it (files written before seals
    end after the message)."""
    n, i = varint(c.data, offset)
    body = c.data[i:i + n]
    m, end = c.message_at(offset, cls)
    if end < len(c.data):
        seal, end = c.message_at(end, pb.Seal)
        if seal.marker != SEAL_MARKER:
            raise ValueError(f"{c.path}: its {cls.__name__} is followed by something other than its seal")
        if xxhash.xxh3_64_intdigest(body) != seal.checksum:
            raise ValueError(f"{c.path}: checksum mismatch in its {cls.__name__}")
        if end != len(c.data):
            raise ValueError(f"{c.path}: bytes after the seal")
    return m


def is_seal(pb, c, offset):
    try:
        seal, _ = c.message_at(offset, pb.Seal)
        return seal.marker == SEAL_MARKER
    except Exception:  # not a Seal's wire format
        return False


def check_index(pb, index, open_file, where):
    if index.format_version != 2:
        raise ValueError(f"{where}: format_version {index.format_version}, this reader knows 2")
    records = 0
    for t in index.tensors:
        total = 1
        for d in t.shape:
            total *= d
        covered = 0
        for loc in t.records:
            f = open_file(loc.file)
            rec, _ = f.message_at(loc.byte_offset, pb.TensorRecord)
            what = f"{where}: tensor {t.name} record at {loc.file or '(this file)'}:{loc.byte_offset}"
            if rec.name != t.name or rec.dtype != t.dtype or list(rec.shape) != list(t.shape):
                raise ValueError(f"{what}: the record says {rec.name} {rec.dtype} {list(rec.shape)}")
            if (rec.offset, rec.numel) != (loc.offset, loc.numel) or list(rec.box_offset) != list(loc.box_offset) \
                    or list(rec.box_extent) != list(loc.box_extent) or list(rec.box_frame) != list(loc.box_frame):
                raise ValueError(f"{what}: the record's region differs from the index's")
            if len(rec.data) != rec.numel * DTYPE_BYTES[rec.dtype]:
                raise ValueError(f"{what}: {len(rec.data)} bytes for {rec.numel} elements")
            h = xxhash.xxh3_64_intdigest(rec.data)
            if h != rec.checksum or h != loc.checksum:
                raise ValueError(f"{what}: XXH3-64 {h:#x}, record {rec.checksum:#x}, index {loc.checksum:#x}")
            covered += rec.numel
            records += 1
        if covered != total:
            raise ValueError(f"{where}: tensor {t.name} {list(t.shape)}: records cover {covered} of {total} elements")
    return records


def read_checkpoint(pb, path):
    if os.path.isdir(path):
        indexes = sorted(glob.glob(os.path.join(path, "*.index")))
        if not indexes:
            raise ValueError(f"{path}: no <prefix><kind>.index file")
        files = {}

        def open_file(name):
            if not name:
                raise ValueError(f"{path}: a record without its shard file")
            if name not in files:
                files[name] = Container(os.path.join(path, name))
                header, _ = files[name].message_at(8, pb.Shard)
                if header.format_version != 2:
                    raise ValueError(f"{name}: shard format_version {header.format_version}")
            return files[name]

        n = 0
        for ip in indexes:
            index = sealed_at(pb, Container(ip), 8, pb.Index)
            n += check_index(pb, index, open_file, ip)
            for name in files:
                header, _ = files[name].message_at(8, pb.Shard)
                if header.save_id != index.save_id:
                    raise ValueError(f"{name}: save_id {header.save_id} is not the index's {index.save_id}")
            print(f"{ip}: {index.kind}, {len(index.tensors)} tensors, {n} records in "
                  f"{len(index.shard_files)} shard file(s), layout {index.layout.plugin or 'none'} "
                  f"world {index.layout.world_size} precision {index.layout.precision or '-'}: every checksum good")
        return
    c = Container(path)
    header, i = c.message_at(8, pb.Shard)
    starts = []
    while i < len(c.data):  # the records, then the Index (and its Seal) last
        starts.append(i)
        n, j = varint(c.data, i)
        i = j + n
    last = starts[-2] if len(starts) > 1 and is_seal(pb, c, starts[-1]) else starts[-1]
    index = sealed_at(pb, c, last, pb.Index)
    if index.save_id != header.save_id:
        raise ValueError(f"{path}: save_id of the header and the index differ")
    n = check_index(pb, index, lambda name: c, path)
    print(f"{path}: {index.kind}, {len(index.tensors)} tensors, {n} records in one file: every checksum good")


def main():
    args = sys.argv[1:]
    proto_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto")
    if "--proto" in args:
        k = args.index("--proto")
        proto_dir = args[k + 1]
        del args[k:k + 2]
    pb = bindings(proto_dir)
    target = args[0]
    try:
        if os.path.isdir(target) and os.path.exists(os.path.join(target, "progress.ckpt")):
            for kind in ("model", "optimizer"):  # a vit_train step folder
                for p in (os.path.join(target, kind), os.path.join(target, kind + ".ckpt")):
                    if os.path.exists(p):
                        read_checkpoint(pb, p)
            prog = sealed_at(pb, Container(os.path.join(target, "progress.ckpt")), 8, pb.TrainingProgress)
            sched = sealed_at(pb, Container(os.path.join(target, "scheduler.ckpt")), 8, pb.SchedulerState)
            for name, want in prog.file_checksums.items():
                if xxhash.xxh3_64_intdigest(open(os.path.join(target, name), "rb").read()) != want:
                    raise ValueError(f"{os.path.join(target, name)}: checksum mismatch with progress.ckpt's")
            print(f"progress: epoch {prog.epoch} step {prog.step}, {len(prog.rng)} generator states; "
                  f"scheduler {sched.type} at {sched.last_epoch}")
        else:
            read_checkpoint(pb, target)
    except (ValueError, OSError) as e:
        print(f"FAIL: {e}")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
