"""Protobuf wire-format helpers shared by the reference readers in tools/."""


def varint(buf, i):
    """The varint starting at buf[i] and the index after it."""
    shift = value = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7
