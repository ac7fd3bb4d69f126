"""Loopback ports for the processes tests and benchmarks start."""

import random
import socket

_ports_given = set()


def free_port():
    """A loopback port nothing listens on, never the same one twice in this process. It is
    taken below the kernel's ephemeral range (32768 and up), so that neither a second call
    nor an outgoing connection made before the caller binds it can take it (CI once gave an
    API and a router the same port from two bind-to-0 calls)."""
    rng = random.SystemRandom()
    while True:
        port = rng.randrange(20000, 32768)
        if port in _ports_given:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _ports_given.add(port)
        return port
