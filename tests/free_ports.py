#!/usr/bin/env python3
"""tests/free_ports.py N: the first of N consecutive TCP ports that nobody
holds now; tests/free_ports.py --offsets OFF...: a port P with P + each OFF
free (the private Slurm cluster's daemons and fleet, scripts/slurm-cluster.sh).

Ports are looked for below the kernel's ephemeral range: a port from that
range can become the local end of any process's outgoing connection before
the test's process binds it (a slurmd once found its port so taken and the
cluster never came up). The search starts at a point that depends on the
pid, so tests side by side look in different places. A port counts as free
when it binds on every address (0.0.0.0), as a daemon binds it. Exit 1 when
none is found."""
import os
import socket
import sys

if len(sys.argv) > 1 and sys.argv[1] == "--offsets":
    offsets = [int(a) for a in sys.argv[2:]] or [0]
else:
    offsets = list(range(int(sys.argv[1]) if len(sys.argv) > 1 else 1))
lo = 32768
try:
    lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    pass
top = lo - 1 - max(offsets)
span = max(1, top - 10000)
start = 10000 + (os.getpid() * 7919) % span
step = len(offsets)
for base in list(range(start, top, step)) + list(range(10000, start, step)):
    socks = []
    try:
        for off in offsets:
            s = socket.socket()
            s.bind(("0.0.0.0", base + off))
            socks.append(s)
        print(base)
        sys.exit(0)
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
sys.exit(1)
