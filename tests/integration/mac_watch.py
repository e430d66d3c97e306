#!/usr/bin/env python3
"""Counts the frames that come in on one link with a given source MAC, until
a stop file appears or a time limit passes; prints one JSON line:
{"frames": N, "first": "ethertype 0x86dd, 92 bytes, +0.123 s",
 "foreign_arp": M, "first_foreign_arp": "..."}.

  mac_watch.py --link n-b --mac 02:..:01 [--arp-ip 10.0.0.7] --stop-file F --seconds 60

live_network.sh runs it on the testbed switch's port of the destination
host: a copy that is not yet committed must send nothing from the source's
MAC, or the switch sends the source's clients to it. With --arp-ip it also
counts ARP frames that give that address with any other MAC (foreign_arp):
a copy that asks ARP with the source's address before it has the source's
MAC makes its clients send to a MAC that is about to go, for as long as
their ARP entry is locked (a second on Linux).
"""
import argparse
import json
import os
import select
import socket
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--link", required=True)
    ap.add_argument("--mac", required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--ready-file")
    ap.add_argument("--arp-ip")
    a = ap.parse_args()
    mac = bytes.fromhex(a.mac.replace(":", ""))
    arp_ip = socket.inet_aton(a.arp_ip) if a.arp_ip else None
    # Protocol 0 receives nothing until the bind names the link: a socket
    # opened for ETH_P_ALL would queue the frames of every port of the
    # switch (the source's own, from its port) until then.
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    s.bind((a.link, ETH_P_ALL))
    if a.ready_file:
        open(a.ready_file, "w").close()
    start = time.monotonic()
    frames, first = 0, None
    foreign_arp, first_foreign_arp = 0, None
    while time.monotonic() - start < a.seconds and not os.path.exists(a.stop_file):
        if not select.select([s], [], [], 0.1)[0]:
            continue
        data, addr = s.recvfrom(65536)
        if addr[0] != a.link or addr[2] == PACKET_OUTGOING or len(data) < 14:
            continue
        # ARP for IPv4 over Ethernet: sender MAC at 22..28, sender IP at 28..32.
        if (arp_ip and len(data) >= 42 and data[12:14] == b"\x08\x06" and
                data[28:32] == arp_ip and data[22:28] != mac):
            foreign_arp += 1
            if first_foreign_arp is None:
                first_foreign_arp = "ARP from %s, +%.3f s" % (data[22:28].hex(":"),
                                                            time.monotonic() - start)
        if data[6:12] != mac:
            continue
        frames += 1
        if first is None:
            first = "ethertype 0x%04x, %d bytes, +%.3f s" % (
                int.from_bytes(data[12:14], "big"), len(data), time.monotonic() - start)
    print(json.dumps({"mac": a.mac, "frames": frames, "first": first, "foreign_arp": foreign_arp,
                      "first_foreign_arp": first_foreign_arp}))


if __name__ == "__main__":
    main()
