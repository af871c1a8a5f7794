#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets into a directory.

Seeds are the shipped captures (the large one cut to its first records) and small
variants of seed002-two-writes.pcap in every format and link type tcpstall reads:
classic pcap in both byte orders and both timestamp resolutions, the modified format,
pcapng in both byte orders with several interfaces, statistics, name resolution,
simple packet, custom and unknown blocks, and the link types Linux cooked (v1, v2),
raw IP, BSD loopback, 802.1Q/802.1ad and IPv6. Usage: make_seeds.py OUT_DIR
"""

import os
import struct
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CAPTURES = os.path.join(ROOT, "captures")
# Variants keep only the first records: the handshake and a few stalls. Small seeds
# keep the fuzzer fast; the mutations join and repeat them.
VARIANT_RECORDS = 14


def read_pcap(path):
    """(link type, [(sec, usec, frame)]) of a little-endian microsecond pcap."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"\xd4\xc3\xb2\xa1", path
    link = struct.unpack_from("<I", data, 20)[0]
    records, at = [], 24
    while at + 16 <= len(data):
        sec, usec, caplen, _orig = struct.unpack_from("<IIII", data, at)
        records.append((sec, usec, data[at + 16 : at + 16 + caplen]))
        at += 16 + caplen
    return link, records


def pcap(records, link=1, endian="<", nanos=False, modified=False):
    magic = 0xA1B2CD34 if modified else (0xA1B23C4D if nanos else 0xA1B2C3D4)
    out = struct.pack(endian + "IHHiIII", magic, 2, 4, 0, 0, 262144, link)
    for sec, usec, frame in records:
        frac = usec * 1000 if nanos else usec
        out += struct.pack(endian + "IIII", sec, frac, len(frame), len(frame))
        if modified:
            out += struct.pack(endian + "IHBB", 1, 0x0800, 0, 0)
        out += frame
    return out


def pad4(b):
    return b + b"\0" * (-len(b) % 4)


def block(e, btype, body):
    body = pad4(body)
    total = 12 + len(body)
    return struct.pack(e + "II", btype, total) + body + struct.pack(e + "I", total)


def shb(e):
    return block(e, 0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def opt(e, code, value):
    return struct.pack(e + "HH", code, len(value)) + pad4(value)


def idb(e, link, tsresol=None, tsoffset=None, name=None):
    body = struct.pack(e + "HHI", link, 0, 262144)
    opts = b""
    if name is not None:
        opts += opt(e, 2, name)
    if tsresol is not None:
        opts += opt(e, 9, bytes([tsresol]))
    if tsoffset is not None:
        opts += opt(e, 14, struct.pack(e + "q", tsoffset))
    if opts:
        opts += struct.pack(e + "HH", 0, 0)
    return block(e, 1, body + opts)


def epb(e, if_id, units, frame):
    body = struct.pack(e + "IIIII", if_id, units >> 32, units & 0xFFFFFFFF, len(frame), len(frame))
    return block(e, 6, body + frame)


def spb(e, frame):
    return block(e, 3, struct.pack(e + "I", len(frame)) + frame)


def isb(e, units):
    body = struct.pack(e + "III", 0, units >> 32, units & 0xFFFFFFFF)
    body += opt(e, 4, struct.pack(e + "Q", 57)) + struct.pack(e + "HH", 0, 0)
    return block(e, 5, body)


def nrb(e):
    rec = struct.pack(e + "HH", 1, 14) + pad4(bytes([127, 0, 0, 1]) + b"localhost\0")
    return block(e, 4, rec + struct.pack(e + "HH", 0, 0))


def custom(e):
    return block(e, 0x00000BAD, struct.pack(e + "I", 32473) + b"tcpstall")


def unknown(e):
    return block(e, 0x12345678, b"unknown block body")


def wrap(kind, frame):
    macs, proto, payload = frame[:12], frame[12:14], frame[14:]
    if kind == "sll":
        return struct.pack(">HHH", 0, 772, 6) + macs[6:12] + b"\0\0" + proto + payload
    if kind == "sll2":
        return proto + b"\0\0" + struct.pack(">IHBB", 1, 772, 0, 6) + macs[6:12] + b"\0\0" + payload
    if kind == "raw":
        return payload
    if kind == "null":
        return struct.pack("<I", 2) + payload
    if kind == "loop":
        return struct.pack(">I", 2) + payload
    if kind == "vlan":
        return macs + b"\x81\x00" + struct.pack(">H", 42) + proto + payload
    if kind == "qinq":
        return macs + b"\x88\xa8" + struct.pack(">H", 100) + b"\x81\x00" + struct.pack(">H", 42) + proto + payload
    if kind == "ipv6":
        ihl = (payload[0] & 15) * 4
        total = struct.unpack_from(">H", payload, 2)[0]
        tcp = payload[ihl:total]
        lo = bytes(15) + b"\x01"
        return macs + b"\x86\xdd" + struct.pack(">IHBB", 0x60000000, len(tcp), 6, 64) + lo + lo + tcp
    raise ValueError(kind)


LINKS = {"sll": 113, "sll2": 276, "raw": 101, "null": 0, "loop": 108, "vlan": 1, "qinq": 1, "ipv6": 1}


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    seeds = {}
    for name in sorted(os.listdir(CAPTURES)):
        if not name.endswith(".pcap"):
            continue
        path = os.path.join(CAPTURES, name)
        if os.path.getsize(path) <= 8192:
            with open(path, "rb") as f:
                seeds[name] = f.read()
        else:
            link, records = read_pcap(path)
            seeds["head-" + name] = pcap(records[:24], link)
    _, records = read_pcap(os.path.join(CAPTURES, "seed002-two-writes.pcap"))
    few = records[:VARIANT_RECORDS]
    seeds["pcap-be-usec.pcap"] = pcap(few, endian=">")
    seeds["pcap-le-nsec.pcap"] = pcap(few, nanos=True)
    seeds["pcap-be-nsec.pcap"] = pcap(few, endian=">", nanos=True)
    seeds["pcap-modified.pcap"] = pcap(few, modified=True)
    for kind, link in LINKS.items():
        seeds["link-%s.pcap" % kind] = pcap([(s, u, wrap(kind, f)) for s, u, f in few], link)
    for e, tag in (("<", "le"), (">", "be")):
        micros = [(s * 1_000_000 + u, f) for s, u, f in few]
        # Two interfaces (Linux cooked v2 in nanoseconds, Ethernet in microseconds),
        # with statistics and name resolution between the packets.
        b = shb(e) + idb(e, 276, tsresol=9) + idb(e, 1, name=b"lo")
        for i, (us, f) in enumerate(micros):
            if i == len(micros) // 2:
                b += nrb(e) + isb(e, us) + custom(e) + unknown(e)
            b += epb(e, 0, us * 1000, wrap("sll2", f)) if i % 2 == 0 else epb(e, 1, us, f)
        seeds["ng-%s-two-ifaces.pcapng" % tag] = b
        # Timestamps stored 1000 s early, if_tsoffset +1000 s; a power-of-two resolution.
        b = shb(e) + idb(e, 1, tsresol=0x80 | 20, tsoffset=1000)
        for us, f in micros:
            b += epb(e, 0, ((us - 1000 * 1_000_000) << 20) // 1_000_000, f)
        seeds["ng-%s-tsoffset.pcapng" % tag] = b
        # Simple packet blocks, and a second section that restarts the interfaces.
        b = shb(e) + idb(e, 101)
        for _, f in micros[:6]:
            b += spb(e, wrap("raw", f))
        b += shb(e) + idb(e, 1)
        for us, f in micros[6:]:
            b += epb(e, 0, us, f)
        seeds["ng-%s-spb-sections.pcapng" % tag] = b
    for name, data in seeds.items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
    print("%d seeds, %d bytes, in %s" % (len(seeds), sum(map(len, seeds.values())), out_dir))


if __name__ == "__main__":
    main()
