#!/usr/bin/env python3
"""What an outsider, or a peer that is not part of a migration, can get
from a pagesrv: the security integration test (security.sh) drives it.

  peer_probe.py page-channel ADDR ID --credentials DIR
      authenticate with DIR's certificate and ask for migration ID's pages
  peer_probe.py plaintext ADDR       a valid control frame, without TLS
  peer_probe.py garbage ADDR         random bytes
  peer_probe.py replay ADDR PCAP FROM_IP
      replay what FROM_IP sent on its first connection to ADDR in PCAP
  peer_probe.py storm ADDR N         N garbage, half-open and idle connections
  peer_probe.py hostile-images ADDR NAME --credentials DIR
      an authenticated peer prepares a migration and sends an image NAME
  peer_probe.py find-pattern PCAP --seed S --pages N
      how many of 64 sampled memload pages appear in PCAP in the clear

Every answer is one JSON line. Every wait is bounded.
"""
import argparse
import json
import os
import random
import resource
import socket
import ssl
import struct
import sys
import time

MAGIC = 0x43595246  # "FRYC"


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(num, payload):  # length-delimited
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def field_varint(num, v):
    return varint(num << 3) + varint(v)


def frame(envelope):
    return struct.pack("<IHHI", MAGIC, 1, 0, len(envelope)) + envelope


def page_channel_open(migration_id):
    body = field(1, migration_id.encode()) + field_varint(2, 1)  # kind FAULT
    return frame(field(15, body))


def incoming_prepare():
    body = field(1, b"0123456789abcdef0123456789abcdef") + field(2, b"10.0.0.1:7140")
    return frame(field(2, body))


def endpoint(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


def read_answer(sock, seconds=3.0):
    """Everything the peer sends until it closes or `seconds` pass."""
    sock.settimeout(0.2)
    got = bytearray()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    return bytes(got)


def verdict(answer):
    return {"answer_bytes": len(answer), "control_frame": struct.pack("<I", MAGIC) in answer}


def raw_send(addr, data):
    with socket.create_connection(endpoint(addr), timeout=5) as s:
        try:
            s.sendall(data)
        except OSError:
            pass
        return verdict(read_answer(s))


def read_frame(tls):
    tls.settimeout(15)
    head = b""
    while len(head) < 12:
        chunk = tls.recv(12 - len(head))
        if not chunk:
            return None
        head += chunk
    magic, _, _, length = struct.unpack("<IHHI", head)
    if magic != MAGIC or length > 1 << 20:
        raise SystemExit("malformed frame from the daemon")
    body = b""
    while len(body) < length:
        chunk = tls.recv(length - len(body))
        if not chunk:
            return None
        body += chunk
    return body


def read_varint(data, i):
    """(value, next index)."""
    v, shift = 0, 0
    while True:
        b = data[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def parse_fields(data):
    """Top-level protobuf fields: {number: bytes or int}."""
    out, i = {}, 0
    while i < len(data):
        key, i = read_varint(data, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            out[num], i = read_varint(data, i)
        elif wire == 2:
            n, i = read_varint(data, i)
            out[num] = data[i : i + n]
            i += n
        else:
            raise SystemExit(f"unexpected wire type {wire}")
    return out


def page_channel(addr, migration_id, creds):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_verify_locations(os.path.join(creds, "ca.pem"))
    ctx.load_cert_chain(os.path.join(creds, "cert.pem"), os.path.join(creds, "key.pem"))
    host, port = endpoint(addr)
    with socket.create_connection((host, port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(page_channel_open(migration_id))
            body = read_frame(tls)
    if body is None:
        return {"accepted": False, "error": "closed"}
    env = parse_fields(body)
    if 1 in env:  # error_reply
        return {"accepted": False, "error": parse_fields(env[1]).get(1, b"").decode()}
    return {"accepted": 16 in env, "error": ""}


def tls_connect(addr, creds):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_verify_locations(os.path.join(creds, "ca.pem"))
    ctx.load_cert_chain(os.path.join(creds, "cert.pem"), os.path.join(creds, "key.pem"))
    host, port = endpoint(addr)
    raw = socket.create_connection((host, port), timeout=5)
    return ctx.wrap_socket(raw, server_hostname=host)


def hostile_images(addr, name, creds):
    migration = os.urandom(16).hex()
    with tls_connect(addr, creds) as tls:
        prepare = field(1, migration.encode()) + field(2, b"10.0.0.1:7140")
        tls.sendall(frame(field(2, prepare)))
        env = parse_fields(read_frame(tls) or b"")
        if 3 not in env:  # prepare_ok
            return {"prepared": False, "refused": True, "error": str(env)}
        image = field(1, name.encode()) + field(2, b"not an image") + field_varint(3, 0)
        tls.sendall(frame(field(4, field(1, image) + field_varint(2, 1))))
        body = read_frame(tls)
    env = parse_fields(body or b"")
    result = parse_fields(env.get(5, b""))  # restore_result
    return {"prepared": True, "refused": result.get(1, 1) == 0,
            "error": result.get(2, b"").decode(errors="replace")}


def pcap_packets(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    i = 24
    while i + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[i : i + 16])
        pkt = data[i + 16 : i + 16 + incl]
        i += 16 + incl
        if linktype == 1:  # Ethernet
            if len(pkt) < 14 or pkt[12:14] != b"\x08\x00":
                continue
            pkt = pkt[14:]
        elif linktype == 113:  # Linux cooked
            pkt = pkt[16:]
        if len(pkt) < 20 or pkt[9] != 6:
            continue
        ihl = (pkt[0] & 15) * 4
        total = struct.unpack(">H", pkt[2:4])[0]
        src, dst = socket.inet_ntoa(pkt[12:16]), socket.inet_ntoa(pkt[16:20])
        tcp = pkt[ihl:total]
        sport, dport, seq = struct.unpack(">HHI", tcp[:8])
        flags = tcp[13]
        off = (tcp[12] >> 4) * 4
        yield src, sport, dst, dport, seq, flags, tcp[off:]


def client_bytes(pcap, from_ip, addr):
    """What `from_ip` sent on its first connection to `addr`, in order."""
    host, port = endpoint(addr)
    flow, segments = None, {}
    for src, sport, dst, dport, seq, flags, payload in pcap_packets(pcap):
        if src != from_ip or dst != host or dport != port:
            continue
        if flow is None and flags & 0x02:  # SYN
            flow = sport
            continue
        if sport == flow and payload:
            segments.setdefault(seq, payload)
    return b"".join(segments[s] for s in sorted(segments))


def storm(addr, count):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    host, port = endpoint(addr)
    held, refused, t0 = [], 0, time.monotonic()
    for n in range(count):
        if time.monotonic() - t0 > 60:
            break
        try:
            s = socket.create_connection((host, port), timeout=2)
        except OSError:
            refused += 1
            continue
        kind = n % 3
        try:
            if kind == 0:
                s.sendall(os.urandom(512))
            elif kind == 1:  # the start of a TLS record, never finished
                s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        except OSError:
            pass
        held.append(s)
        if len(held) >= 300:  # the oldest go: half-open ones stay a while
            for old in held[:100]:
                old.close()
            del held[:100]
    time.sleep(1)
    for s in held:
        s.close()
    return {"connections": count, "refused": refused, "seconds": round(time.monotonic() - t0, 1)}


def pattern(seed, page, word):
    m = (1 << 64) - 1
    x = seed ^ ((page * 0x9E3779B97F4A7C15) & m) ^ ((word * 0xBF58476D1CE4E5B9) & m)
    x ^= x >> 31
    return (x * 0x94D049BB133111EB) & m


def find_pattern(pcap, seed, pages):
    with open(pcap, "rb") as f:
        data = f.read()
    sample = [p for p in range(0, pages, max(1, pages // 64))][:64]
    found = 0
    for p in sample:
        # 32 bytes from the middle of the page: never split by a header of ours.
        needle = b"".join(struct.pack("<Q", pattern(seed, p, w)) for w in range(200, 204))
        found += needle in data
    return {"sampled": len(sample), "found": found, "capture_bytes": len(data)}


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("page-channel")
    p.add_argument("addr")
    p.add_argument("migration")
    p.add_argument("--credentials", required=True)
    sub.add_parser("plaintext").add_argument("addr")
    sub.add_parser("garbage").add_argument("addr")
    p = sub.add_parser("replay")
    p.add_argument("addr")
    p.add_argument("pcap")
    p.add_argument("from_ip")
    p = sub.add_parser("storm")
    p.add_argument("addr")
    p.add_argument("count", type=int)
    p = sub.add_parser("hostile-images")
    p.add_argument("addr")
    p.add_argument("name")
    p.add_argument("--credentials", required=True)
    p = sub.add_parser("find-pattern")
    p.add_argument("pcap")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--pages", type=int, required=True)
    a = ap.parse_args()
    if a.cmd == "page-channel":
        out = page_channel(a.addr, a.migration, a.credentials)
    elif a.cmd == "plaintext":
        out = raw_send(a.addr, incoming_prepare())
    elif a.cmd == "garbage":
        out = raw_send(a.addr, random.Random(7).randbytes(4096))
    elif a.cmd == "replay":
        data = client_bytes(a.pcap, a.from_ip, a.addr)
        if not data:
            raise SystemExit(f"no connection from {a.from_ip} to {a.addr} in {a.pcap}")
        out = raw_send(a.addr, data) | {"replayed_bytes": len(data)}
    elif a.cmd == "hostile-images":
        out = hostile_images(a.addr, a.name, a.credentials)
    elif a.cmd == "storm":
        out = storm(a.addr, a.count)
    else:
        out = find_pattern(a.pcap, a.seed, a.pages)
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
