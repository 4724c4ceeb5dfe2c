#!/usr/bin/env python3
"""tests/free_ports.py N: the first of N consecutive TCP ports of 127.0.0.1
that nobody listens on now (searched from a point that depends on the pid,
so tests side by side look in different places); exit 1 when none."""
import os
import socket
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
for base in range(20000 + (os.getpid() * 7) % 30000, 65536 - n, n):
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
