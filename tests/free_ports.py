#!/usr/bin/env python3
"""tests/free_ports.py N: the first of N consecutive TCP ports of 127.0.0.1
that nobody listens on now, below the kernel's ephemeral range (where an
outgoing connection could take one before the test's process binds it),
searched from a point that depends on the pid, so tests side by side look
in different places; exit 1 when none."""
import os
import socket
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
lo = 32768
try:
    lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    pass
span = max(1, lo - n - 10000)
start = 10000 + (os.getpid() * 7919) % span
for base in list(range(start, lo - n, n)) + list(range(10000, start, n)):
    socks = []
    try:
        for p in range(base, base + n):
            s = socket.socket()
            s.bind(("127.0.0.1", p))
            socks.append(s)
        print(base)
        sys.exit(0)
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
sys.exit(1)
