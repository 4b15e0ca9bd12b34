#!/usr/bin/env python3
"""Prints a TCP port on 127.0.0.1 for a daemon the caller starts next.

The caller binds the port later, in another process: in between, nothing
else may be given it. Two things could be:
  - the kernel's own picks (a bind to port 0, an outgoing connection's local
    port), made by anything on the machine, the other lanes of a parallel
    test run included. They come from the ephemeral range
    (/proc/sys/net/ipv4/ip_local_port_range), so the port is picked outside
    it (from 20000 up: below are the well-known ports of the components the
    tests run, such as etcd's 2379 and kubelet's 10250);
  - another caller of this script. Each port handed out is leased: a
    directory named after it under the lease directory (argv[1]), made with
    mkdir, which fails for the second of two callers. A lease lasts
    LEASE_S; a port held longer is still skipped, because a port that
    cannot be bound right now (a daemon listens on it) is never handed out.
Where the ephemeral range leaves nothing outside it, the kernel's pick is
leased instead.
"""
import os
import random
import socket
import sys
import time

LEASE_S = 3600
FIRST = 20000


def bindable(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def lease(leases, port):
    try:
        os.mkdir(os.path.join(leases, str(port)))
    except FileExistsError:
        return False
    return True


def drop_expired(leases):
    now = time.time()
    for name in os.listdir(leases):
        path = os.path.join(leases, name)
        try:
            if now - os.stat(path).st_mtime > LEASE_S:
                os.rmdir(path)
        except OSError:
            pass  # another caller dropped it first


def main():
    leases = sys.argv[1]
    os.makedirs(leases, exist_ok=True)
    drop_expired(leases)
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo, hi = (int(x) for x in f.read().split())
    outside = [p for p in range(FIRST, 65536) if not lo <= p <= hi]
    for _ in range(200):
        if outside:
            port = random.choice(outside)
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        if not lease(leases, port):
            continue
        if bindable(port):
            print(port)
            return 0
        os.rmdir(os.path.join(leases, str(port)))  # held by something else
    print("free_port: no free port found outside the ephemeral range "
          f"{lo}-{hi} (leases in {leases})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
