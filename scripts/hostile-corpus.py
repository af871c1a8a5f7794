#!/usr/bin/env python3
"""Writes a corpus of hostile capture files into a directory.

    scripts/hostile-corpus.py DIR [--connections N]

Every file is something a capture from production, a damaged disk or an attacker could
hand to `tcpstall analyze`: cuts at every header boundary, absurd lengths, bad pcapng
block lengths, section loops, interfaces past the limit, deep encapsulation, hostile IP
fragments, gzip and zstd bombs, timestamps backwards and years apart, a million tiny
connections. Whatever the file, `tcpstall analyze` must end with exit 0 (a counted
warning where something was left out) or exit 2 (one line of error), within bounded time
and memory: crates/tcpstall-cli/tests/hostile_inputs.rs checks that on every file, and
docs/malformed-captures.md says what each kind of input does.

Python 3 standard library only; the zstd frames are written by hand (RFC 8878).
"""

import argparse
import gzip
import os
import struct
import zlib

# ---------------------------------------------------------------------------------------
# Encoders: pcap, pcapng, and the headers of a packet. Checksums are left at zero: the
# analysis does not verify them.

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101


def pcap_header(linktype=LINKTYPE_ETHERNET, nanos=False, snaplen=262144):
    magic = 0xA1B23C4D if nanos else 0xA1B2C3D4
    return struct.pack("<IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)


def pcap_record(sec, frac, data, origlen=None, caplen=None):
    caplen = len(data) if caplen is None else caplen
    origlen = len(data) if origlen is None else origlen
    return struct.pack("<IIII", sec, frac, caplen, origlen) + data


def pcap(packets, linktype=LINKTYPE_ETHERNET, nanos=False):
    """`packets`: (seconds, fraction, frame) each."""
    return pcap_header(linktype, nanos) + b"".join(
        pcap_record(s, f, d) for s, f, d in packets
    )


def pad4(body):
    return body + b"\0" * (-len(body) % 4)


def block(block_type, body, total=None, trailing=None, endian="<"):
    body = pad4(body)
    length = 12 + len(body)
    total = length if total is None else total
    trailing = total if trailing is None else trailing
    return (
        struct.pack(endian + "II", block_type, total)
        + body
        + struct.pack(endian + "I", trailing)
    )


def shb(endian="<", section_length=-1, options=b""):
    body = struct.pack(endian + "IHHq", 0x1A2B3C4D, 1, 0, section_length) + options
    return block(0x0A0D0D0A, body, endian=endian)


def option(code, value, endian="<"):
    return struct.pack(endian + "HH", code, len(value)) + pad4(value)


def idb(linktype=LINKTYPE_ETHERNET, tsresol=None, options=b"", endian="<"):
    if tsresol is not None:
        options = option(9, bytes([tsresol]), endian) + options
    if options:
        options += option(0, b"", endian)
    body = struct.pack(endian + "HHI", linktype, 0, 0) + options
    return block(1, body, endian=endian)


def epb(if_id, units, data, origlen=None, caplen=None, endian="<"):
    caplen = len(data) if caplen is None else caplen
    origlen = len(data) if origlen is None else origlen
    body = (
        struct.pack(
            endian + "IIIII", if_id, units >> 32, units & 0xFFFFFFFF, caplen, origlen
        )
        + data
    )
    return block(6, body, endian=endian)


MAC_A = bytes.fromhex("020000000001")
MAC_B = bytes.fromhex("020000000002")


def ethernet(payload, ethertype=0x0800):
    return MAC_B + MAC_A + struct.pack(">H", ethertype) + payload


def vlan(payload, ethertype, tags=1, tpid=0x8100):
    """`tags` 802.1Q tags in front of `payload` (of `ethertype`), as an EtherType payload."""
    out = payload
    inner = ethertype
    for i in range(tags):
        out = struct.pack(">HH", (i % 4094) + 1, inner) + out
        inner = tpid
    return inner, out


def ipv4(payload, proto=6, src="10.0.0.1", dst="10.0.0.2", total=None, ihl=5,
         ident=1, frag=0x4000, options=b""):
    header_len = ihl * 4
    total = header_len + len(payload) if total is None else total
    head = struct.pack(
        ">BBHHHBBH4s4s",
        0x40 | ihl,
        0,
        total & 0xFFFF,
        ident & 0xFFFF,
        frag,
        64,
        proto,
        0,
        bytes(int(x) for x in src.split(".")),
        bytes(int(x) for x in dst.split(".")),
    )
    return head + options + payload


def ipv6(payload, next_header=6, src=1, dst=2, payload_len=None):
    payload_len = len(payload) if payload_len is None else payload_len
    return (
        struct.pack(">IHBB", 6 << 28, payload_len & 0xFFFF, next_header, 64)
        + (b"\x20\x01\x0d\xb8" + b"\0" * 11 + bytes([src]))
        + (b"\x20\x01\x0d\xb8" + b"\0" * 11 + bytes([dst]))
        + payload
    )


def ipv6_extension(next_header, body_len=6):
    """A hop-by-hop or destination options header: padding options only."""
    body = b"\x01" + bytes([body_len - 2]) + b"\0" * (body_len - 2)
    length = (2 + len(body)) // 8 - 1
    return bytes([next_header, length]) + body


SYN, FIN, RST, PSH, ACK = 0x02, 0x01, 0x04, 0x08, 0x10
TCP_OPTIONS = bytes([2, 4, 5, 0xB4, 4, 2, 8, 10]) + struct.pack(">II", 1, 0) + bytes(
    [1, 3, 3, 7]
)


def tcp(sport=40000, dport=8080, seq=1000, ack=0, flags=ACK, payload=b"",
        options=b"", window=65535, offset=None):
    options = pad4(options)
    offset = (20 + len(options)) // 4 if offset is None else offset
    return (
        struct.pack(
            ">HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
            offset << 4, flags, window, 0, 0,
        )
        + options
        + payload
    )


def udp(sport, dport, payload):
    return struct.pack(">HHHH", sport, dport, 8 + len(payload), 0) + payload


# ---------------------------------------------------------------------------------------
# A small conversation: a handshake, a request in two writes whose second waits for a
# delayed ACK (a stall), the response, the close. Times in microseconds.

def conversation(client=("10.0.0.1", 40000), server=("10.0.0.2", 8080)):
    c_ip, c_port = client
    s_ip, s_port = server
    c_isn, s_isn = 1000, 5000

    def c2s(t, seq, ack, flags, payload=b"", options=b""):
        segment = tcp(c_port, s_port, seq, ack, flags, payload, options)
        return t, ethernet(ipv4(segment, src=c_ip, dst=s_ip))

    def s2c(t, seq, ack, flags, payload=b"", options=b""):
        segment = tcp(s_port, c_port, seq, ack, flags, payload, options)
        return t, ethernet(ipv4(segment, src=s_ip, dst=c_ip))

    c, s = c_isn + 1, s_isn + 1
    return [
        c2s(0, c_isn, 0, SYN, options=TCP_OPTIONS),
        s2c(100, s_isn, c, SYN | ACK, options=TCP_OPTIONS),
        c2s(200, c, s, ACK),
        c2s(10_000, c, s, PSH | ACK, b"a" * 100),
        s2c(50_000, s, c + 100, ACK),
        c2s(50_100, c + 100, s, PSH | ACK, b"b" * 50),
        s2c(50_300, s, c + 150, PSH | ACK, b"r" * 200),
        c2s(90_300, c + 150, s + 200, ACK),
        c2s(100_000, c + 150, s + 200, FIN | ACK),
        s2c(100_100, s + 200, c + 151, FIN | ACK),
        c2s(100_200, c + 151, s + 201, ACK),
    ]


def as_pcap(packets, start=1_700_000_000):
    return pcap([(start + t // 1_000_000, t % 1_000_000, d) for t, d in packets])


def as_pcapng(packets, start=1_700_000_000):
    out = shb() + idb(tsresol=6)
    for t, d in packets:
        out += epb(0, start * 1_000_000 + t, d)
    return out


# ---------------------------------------------------------------------------------------
# The corpus, file by file.

class Corpus:
    def __init__(self, directory):
        self.directory = directory
        self.count = 0
        self.size = 0

    def write(self, name, data):
        with open(os.path.join(self.directory, name), "wb") as f:
            f.write(data)
        self.count += 1
        self.size += len(data)


def layered_frame():
    """Ethernet, a VLAN tag, IPv4 with options, TCP with options, payload; with the
    offset where each header ends."""
    segment = tcp(40000, 8080, 1001, 5001, PSH | ACK, b"x" * 40, TCP_OPTIONS)
    ip = ipv4(segment, ihl=6, options=b"\x01\x01\x01\x00")
    ether_type, tagged = vlan(ip, 0x0800)
    frame = ethernet(tagged, ether_type)
    bounds = [6, 12, 14, 16, 18, 18 + 24, 18 + 24 + 13, 18 + 24 + 20,
              18 + 24 + 20 + len(TCP_OPTIONS), len(frame) - 1]
    return frame, bounds


def ipv6_frame():
    """Ethernet, IPv6, hop-by-hop, destination options, a routing header, TCP."""
    segment = tcp(40000, 8080, 1001, 5001, PSH | ACK, b"y" * 30, TCP_OPTIONS)
    routing = bytes([6, 0, 0, 0]) + b"\0" * 4
    dest = ipv6_extension(43)
    hop = ipv6_extension(60)
    frame = ethernet(ipv6(hop + dest + routing + segment, next_header=0), 0x86DD)
    bounds = [14, 14 + 4, 14 + 40, 14 + 48, 14 + 56, 14 + 64, 14 + 64 + 20,
              14 + 64 + 20 + len(TCP_OPTIONS)]
    return frame, bounds


def truncations(corpus):
    packets = conversation()
    whole = as_pcap(packets)
    # The file cut inside the global header and the first records' headers.
    for cut in [0, 1, 4, 6, 8, 12, 16, 20, 23, 24, 28, 32, 36, 39, 40]:
        corpus.write(f"cut-pcap-at-{cut}.pcap", whole[:cut])
    ng = as_pcapng(packets)
    # Section header: type, length, byte-order magic, version, section length, trailing
    # length; interface description; the first enhanced packet block's fields.
    for cut in [4, 8, 12, 16, 24, 27, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64, 68]:
        corpus.write(f"cut-pcapng-at-{cut}.pcapng", ng[:cut])
    # Every header boundary of two layered packets: the file cut there (after a complete
    # conversation), and the record cut there by its snap length.
    for name, (frame, bounds) in [("ipv4", layered_frame()), ("ipv6", ipv6_frame())]:
        base = as_pcap(packets)
        record = pcap_record(1_700_000_001, 0, frame)
        ng_base = as_pcapng(packets)
        ng_record = epb(0, 1_700_000_001_000_000, frame)
        for b in bounds:
            corpus.write(f"cut-{name}-file-at-{b}.pcap", base + record[: 16 + b])
            corpus.write(f"cut-{name}-file-at-{b}.pcapng", ng_base + ng_record[: 28 + b])
            snapped = pcap_record(1_700_000_001, 0, frame[:b], origlen=len(frame))
            corpus.write(f"cut-{name}-snap-at-{b}.pcap", base + snapped + snapped)
            corpus.write(
                f"cut-{name}-snap-at-{b}.pcapng",
                ng_base + epb(0, 1_700_000_001_000_000, frame[:b], origlen=len(frame)),
            )


def absurd_lengths(corpus):
    packets = conversation()
    base = as_pcap(packets)
    frame = packets[3][1]
    for name, caplen in [("4gib", 0xFFFFFFFF), ("limit-plus-1", 262145),
                         ("past-end", len(frame) + 1000)]:
        corpus.write(f"absurd-caplen-{name}.pcap",
                     base + pcap_record(1_700_000_001, 0, frame, caplen=caplen))
    for name, origlen in [("4gib", 0xFFFFFFFF), ("zero", 0), ("below-caplen", 10)]:
        data = [pcap_record(1_700_000_000 + t // 10**6, t % 10**6, d, origlen=origlen)
                for t, d in packets]
        corpus.write(f"absurd-origlen-{name}.pcap", pcap_header() + b"".join(data))
    # IP and TCP lengths that cannot be right, on every data packet of the conversation.
    def edit(name, change):
        out = []
        for t, d in packets:
            d = bytearray(d)
            if len(d) > 54:
                change(d)
            out.append((t, bytes(d)))
        corpus.write(f"absurd-{name}.pcap", as_pcap(out))
    edit("ipv4-total-65535", lambda d: d.__setitem__(slice(16, 18), b"\xff\xff"))
    edit("ipv4-total-0", lambda d: d.__setitem__(slice(16, 18), b"\x00\x00"))
    edit("ipv4-total-below-header", lambda d: d.__setitem__(slice(16, 18), b"\x00\x10"))
    edit("ipv4-ihl-15", lambda d: d.__setitem__(14, 0x4F))
    edit("ipv4-ihl-0", lambda d: d.__setitem__(14, 0x40))
    edit("tcp-offset-15", lambda d: d.__setitem__(46, 0xF0))
    edit("tcp-offset-0", lambda d: d.__setitem__(46, 0x00))
    v6 = []
    for t, d in packets:
        segment = d[34:]
        v6.append((t, ethernet(ipv6(segment, payload_len=0xFFFF if len(segment) > 20
                                    else None), 0x86DD)))
    corpus.write("absurd-ipv6-payload-65535.pcap", as_pcap(v6))
    # TCP options with lengths of 0, 1 and past the header.
    for name, opts in [("zero", b"\x08\x00"), ("one", b"\x02\x01"),
                       ("past-header", b"\x08\xff"), ("sack-255", b"\x05\xff")]:
        bad = [(t, ethernet(ipv4(tcp(flags=ACK, payload=b"z", options=opts * 2))))
               for t in range(0, 10_000, 1000)]
        corpus.write(f"absurd-tcp-option-length-{name}.pcap", as_pcap(bad))
    # Headers of the capture itself.
    corpus.write("absurd-pcap-snaplen-0-linktype-65535.pcap",
                 struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 0, 0xFFFF)
                 + base[24:])
    corpus.write("absurd-pcap-version-0.pcap",
                 struct.pack("<IHHiIII", 0xA1B2C3D4, 0, 0, 0, 0, 65535, 1) + base[24:])
    corpus.write("absurd-pcap-big-endian-modified.pcap", bytes.fromhex("a1b2cd34") + base[4:])


def bad_blocks(corpus):
    packets = conversation()
    head = shb() + idb()
    good = epb(0, 1_700_000_000_000_000, packets[3][1])
    for total in [0, 4, 11, 12, 13, 0xFFFFFFFC, 0x7FFFFFF0, 16 << 20 | 4]:
        bad = struct.pack("<II", 6, total) + good[8:]
        corpus.write(f"block-length-{total:#x}.pcapng", head + good + bad + good)
    corpus.write("block-trailing-mismatch.pcapng",
                 head + good + block(6, good[8:-4], trailing=len(good) + 4))
    corpus.write("block-epb-caplen-overruns.pcapng",
                 head + epb(0, 0, packets[3][1], caplen=5000))
    corpus.write("block-idb-option-overruns.pcapng",
                 shb() + block(1, struct.pack("<HHI", 1, 0, 0) + struct.pack("<HH", 9, 200))
                 + good)
    corpus.write("block-shb-length-20.pcapng", struct.pack("<III", 0x0A0D0D0A, 20, 0x1A2B3C4D)
                 + b"\0" * 8)
    corpus.write("block-shb-bad-byte-order.pcapng",
                 struct.pack("<III", 0x0A0D0D0A, 28, 0x01020304) + b"\0" * 16)
    corpus.write("block-unknown-types.pcapng",
                 head + b"".join(block(t, b"\xff" * 37) for t in
                                 [0, 4, 5, 7, 9, 10, 0x80000001, 0xFFFFFFFF]) + good)
    # The obsolete packet block, on an interface past every one declared.
    obsolete = block(2, struct.pack("<HHIIII", 9, 0, 0, 0, 60, 60) + packets[3][1])
    corpus.write("block-obsolete-packet-undeclared-interface.pcapng", head + obsolete + good)


def section_loops(corpus):
    packets = conversation()
    frame = packets[3][1]
    # 100,000 section headers in a row, then packets; sections that each declare an
    # interface and hold one packet, in alternating byte orders; section lengths that
    # point backwards or past the end.
    corpus.write("sections-100000-empty.pcapng",
                 shb() * 100_000 + idb() + epb(0, 1_700_000_000_000_000, frame))
    out = []
    for i in range(20_000):
        endian = "<" if i % 2 == 0 else ">"
        out += [shb(endian, section_length=-(i + 1) * 64), idb(endian=endian),
                epb(0, 1_700_000_000_000_000 + i, frame, endian=endian)]
    corpus.write("sections-20000-alternating-byte-order.pcapng", b"".join(out))
    out = [shb(section_length=28), idb()]
    for t, d in packets:
        out += [epb(0, 1_700_000_000_000_000 + t, d), shb(section_length=2**62)]
    corpus.write("sections-after-every-packet.pcapng", b"".join(out))


def interfaces(corpus):
    packets = conversation()
    out = [shb(), idb() * 70_000]
    for t, d in packets:
        for if_id in [0, 65_535, 65_536, 69_999, 70_000, 0xFFFFFFFF]:
            out.append(epb(if_id, 1_700_000_000_000_000 + t, d))
    corpus.write("interfaces-70000.pcapng", b"".join(out))
    # Interfaces with absurd timestamp resolutions and offsets.
    out = shb()
    for tsresol in [0, 9, 19, 20, 127, 0x80, 0xBF, 0xFF]:
        out += idb(tsresol=tsresol, options=option(14, struct.pack("<q", -(2**62))))
    for i, (t, d) in enumerate(packets):
        out += epb(i % 8, 0xFFFFFFFF_FFFFFFFF - t, d)
    corpus.write("interfaces-absurd-resolutions.pcapng", out)


def deep_encapsulation(corpus):
    segment = tcp(40000, 8080, 1001, 5001, PSH | ACK, b"d" * 10)
    inner_ip = ipv4(segment)
    files = {}
    for depth in [16, 200]:
        ether_type, tagged = vlan(inner_ip, 0x0800, tags=depth)
        files[f"deep-vlan-{depth}"] = ethernet(tagged, ether_type)
        ether_type, tagged = vlan(inner_ip, 0x0800, tags=depth, tpid=0x88A8)
        files[f"deep-qinq-{depth}"] = ethernet(tagged, ether_type)
        labels = b"".join(struct.pack(">I", (16 + i) << 12 | (i == depth - 1) << 8 | 64)
                          for i in range(depth))
        files[f"deep-mpls-{depth}"] = ethernet(labels + inner_ip, 0x8847)
        no_bottom = b"".join(struct.pack(">I", (16 + i) << 12 | 64) for i in range(depth))
        files[f"deep-mpls-no-bottom-{depth}"] = ethernet(no_bottom + inner_ip, 0x8847)
    for depth in [8, 60]:
        packet = inner_ip
        for _ in range(depth):
            packet = ipv4(struct.pack(">HH", 0, 0x0800) + packet, proto=47)
        files[f"deep-gre-{depth}"] = ethernet(packet)
        packet = inner_ip
        for _ in range(depth):
            packet = ipv4(packet, proto=4)
        files[f"deep-ipip-{depth}"] = ethernet(packet)
        packet = ipv6(segment)
        for _ in range(depth):
            packet = ipv6(packet, next_header=41)
        files[f"deep-ip6ip6-{depth}"] = ethernet(packet, 0x86DD)
        packet = ethernet(inner_ip)
        for _ in range(depth):
            vxlan = struct.pack(">II", 0x08000000, 42 << 8) + packet
            packet = ethernet(ipv4(udp(50000, 4789, vxlan), proto=17))
        files[f"deep-vxlan-{depth}"] = packet
    for count in [8, 100, 1000]:
        headers = b""
        for i in range(count):
            headers += ipv6_extension(60 if i < count - 1 else 6)
        files[f"deep-ipv6-extensions-{count}"] = ethernet(ipv6(headers + segment, 60), 0x86DD)
    for name, frame in files.items():
        corpus.write(f"{name}.pcap", as_pcap([(t * 1000, frame) for t in range(20)]))


def fragments(corpus):
    segment = tcp(40000, 8080, 1001, 5001, PSH | ACK, b"f" * 1000)
    # Overlapping pieces of one datagram, conflicting bytes, the last piece twice.
    packets = []
    for i, (offset, size, more) in enumerate([(0, 512, 1), (256, 512, 1), (8, 64, 1),
                                              (512, 508, 0), (0, 1020, 0), (504, 16, 1)]):
        piece = segment[offset:offset + size]
        frag = (more << 13) | (offset // 8)
        packets.append((i * 1000, ethernet(ipv4(piece, ident=7, frag=frag, total=20 + len(piece)))))
    corpus.write("fragments-overlapping.pcap", as_pcap(packets))
    # 100,000 first fragments that never end, each its own datagram; one datagram in
    # 8,000 tiny pieces whose last never comes; pieces past 65,535 bytes.
    out = []
    for i in range(100_000):
        out.append((i * 10, ethernet(ipv4(segment[:64], ident=i, frag=0x2000,
                                          src=f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"))))
    corpus.write("fragments-never-ending-100000.pcap", as_pcap(out))
    out = [(i, ethernet(ipv4(b"\0" * 8, ident=9, frag=0x2000 | i))) for i in range(8000)]
    out.append((9000, ethernet(ipv4(b"\0" * 1480, ident=9, frag=0x1FFF))))
    corpus.write("fragments-tiny-8000.pcap", as_pcap(out))
    # IPv6 fragment headers: overlapping, and never ending.
    v6 = []
    for i in range(5000):
        frag_header = struct.pack(">BBHI", 6, 0, ((i % 3) * 8) << 3 | 1, 1234 + i % 2)
        v6.append((i, ethernet(ipv6(frag_header + segment[:64], next_header=44), 0x86DD)))
    corpus.write("fragments-ipv6-overlapping.pcap", as_pcap(v6))


def zstd_frame(blocks):
    """A zstd frame of `blocks` (RFC 8878 3.1.1): no content size, a 128 KiB window."""
    out = bytearray(b"\x28\xb5\x2f\xfd\x00\x38")
    for i, (kind, data, size) in enumerate(blocks):
        last = i == len(blocks) - 1
        header = int(last) | kind << 1 | size << 3
        out += struct.pack("<I", header)[:3] + data
    return bytes(out)


def raw_block(data):
    return (0, data, len(data))


def rle_block(byte, count):
    return (1, bytes([byte]), count)


BLOCK = 128 * 1024


def bombs(corpus):
    record = struct.pack("<IIII", 1_700_000_000, 0, 262144, 262144)
    # zstd, records of 256 KiB of zeros (each skipped as not IP): 27 bytes of frame
    # for every 256 KiB; this one would expand to 4 GiB.
    blocks = [raw_block(pcap_header())]
    for _ in range(16_000):
        blocks += [raw_block(record), rle_block(0, BLOCK), rle_block(0, BLOCK)]
    corpus.write("bomb-zstd-records.pcap.zst", zstd_frame(blocks))
    # zstd, zero-length records (16 zero bytes each, every one a packet): the costliest
    # content to read; it would expand to 4 GiB.
    blocks = [raw_block(pcap_header())] + [rle_block(0, BLOCK)] * 32_768
    corpus.write("bomb-zstd-zero-records.pcap.zst", zstd_frame(blocks))
    # zstd, a frame of RLE blocks that never reaches a capture header.
    corpus.write("bomb-zstd-no-header.zst", zstd_frame([rle_block(7, BLOCK)] * 8192))
    # gzip, at deflate's best ratio (about 1030 to 1): members of 256 KiB records.
    member = gzip.compress(record + b"\0" * 262144, 9)
    corpus.write("bomb-gzip-records.pcap.gz",
                 gzip.compress(pcap_header(), 9) + member * 1000)
    member = gzip.compress(b"\0" * (1 << 20), 9)
    corpus.write("bomb-gzip-zero-records.pcap.gz",
                 gzip.compress(pcap_header(), 9) + member * 64)
    # Thousands of empty gzip members, then a cut one.
    corpus.write("bomb-gzip-empty-members.pcap.gz",
                 gzip.compress(pcap_header(), 9) + gzip.compress(b"", 9) * 50_000
                 + gzip.compress(as_pcap(conversation())[24:])[:-5])
    # A zstd frame that declares a window of 2^41 bytes.
    corpus.write("bomb-zstd-huge-window.zst", b"\x28\xb5\x2f\xfd\x00\xf8" + b"\x01\x00\x00")


def timestamps(corpus):
    packets = conversation()
    corpus.write("time-reversed.pcap", as_pcap(list(reversed(packets))))
    years = [(t + i * 10 * 365 * 86400 * 10**6, d) for i, (t, d) in enumerate(packets)]
    corpus.write("time-years-apart.pcap",
                 pcap([(min(t // 10**6, 0xFFFFFFFF), t % 10**6, d) for t, d in years]))
    corpus.write("time-backwards-years.pcap",
                 pcap([(0xFFFFFFFF - i * 100_000_000, 0, d) for i, (_, d) in enumerate(packets)]))
    corpus.write("time-extremes.pcap",
                 pcap([(0 if i % 2 else 0xFFFFFFFF, 0xFFFFFFFF if i % 3 else 0, d)
                       for i, (_, d) in enumerate(packets)]))
    corpus.write("time-usec-over-a-million.pcap",
                 pcap([(1_700_000_000, 1_000_000 + t, d) for t, d in packets]))
    corpus.write("time-nsec-over-a-billion.pcap",
                 pcap([(1_700_000_000, 1_000_000_000 + t * 1000, d) for t, d in packets],
                      nanos=True))
    # Data and its ACK 45 years apart, three times in one connection: round trips of
    # 1.4 * 10^18 ns, whose smoothed averages overflow 64 bits unless computed wider.
    year = 365 * 86400
    exchange = []
    for i in range(3):
        seq, ack = 1001 + 10 * i, 5001
        data = tcp(40000, 8080, seq, ack, PSH | ACK, b"q" * 10)
        reply = tcp(8080, 40000, ack, seq + 10, ACK)
        exchange.append((i * 45 * year + 1, 0, ethernet(ipv4(data))))
        exchange.append(((i + 1) * 45 * year, 0,
                         ethernet(ipv4(reply, src="10.0.0.2", dst="10.0.0.1"))))
    corpus.write("time-round-trips-of-45-years.pcap", pcap(exchange))
    out = shb() + idb(tsresol=9)
    for i, (t, d) in enumerate(packets):
        out += epb(0, (0xFFFFFFFFFFFFFFFF - i * 10**15) if i % 2 else i, d)
    corpus.write("time-pcapng-alternating-extremes.pcapng", out)


def many_connections(corpus, connections):
    """`connections` connections of one data segment each, 1 ms apart: 71 bytes a
    packet, 16 of them its record header."""
    template = bytearray(ethernet(ipv4(tcp(flags=PSH | ACK, payload=b"m"))))
    parts = [pcap_header()]
    for i in range(connections):
        t = 1_700_000_000_000_000 + i * 1000
        template[26:30] = struct.pack(">I", 0x0A000000 | i // 64_000 + 1)
        template[34:36] = struct.pack(">H", 1024 + i % 64_000)
        parts.append(struct.pack("<IIII", t // 10**6, t % 10**6, len(template), len(template)))
        parts.append(bytes(template))
    corpus.write("many-connections.pcap", b"".join(parts))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--connections", type=int, default=1_000_000,
                        help="connections in many-connections.pcap (default 1000000: 71 MB)")
    args = parser.parse_args()
    os.makedirs(args.directory, exist_ok=True)
    corpus = Corpus(args.directory)
    for make in [truncations, absurd_lengths, bad_blocks, section_loops, interfaces,
                 deep_encapsulation, fragments, bombs, timestamps]:
        make(corpus)
    many_connections(corpus, args.connections)
    print(f"{corpus.count} files, {corpus.size} bytes in {args.directory}")


if __name__ == "__main__":
    main()
