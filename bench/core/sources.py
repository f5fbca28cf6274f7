"""Local source addresses for the streams' connections (`--source-address`).

Why: a connection to one server address from one local address needs a
local port of its own, from the kernel's ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range: 32768-60999, 28,232 ports, by
default), and a connection the client closed keeps its port for about a
minute (TIME_WAIT). A decode cell of 16,384 streams that restart, cell
after cell, can run out. Each source address brings a range of its own: the
streams' sockets are bound to the given addresses in turn (with
IP_BIND_ADDRESS_NO_PORT, so the port is still chosen at connect, per
destination). A server on 127.0.0.1 gets them without asking when a cell
has more streams than one address has ports: 127.0.0.1, 127.0.0.2, ...
(the whole 127/8 is this host's). When the ports run out anyway, the
stream fails with `out_of_ports`, one line naming the limit and the flag.
"""

from __future__ import annotations

import errno
import ipaddress
import math
import socket
from pathlib import Path

PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_PORTS = 60999 - 32768 + 1
# Linux's IP_BIND_ADDRESS_NO_PORT (24): Python 3.11 does not export it
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
OUT_OF_PORTS = (errno.EADDRNOTAVAIL, errno.EADDRINUSE)


def port_range(path: Path = PORT_RANGE_FILE) -> int:
    """Ephemeral ports one local address has towards one server address."""
    try:
        low, high = (int(x) for x in path.read_text().split()[:2])
        return max(1, high - low + 1)
    except (OSError, ValueError):
        return DEFAULT_PORTS


def check_address(text: str) -> str:
    """`text` as a local IP address this host can bind; ValueError (one line) if not."""
    try:
        addr = ipaddress.ip_address(text.strip())
    except ValueError:
        raise ValueError(f"expected an IP address of this host, got {text!r}") from None
    family = socket.AF_INET6 if addr.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((str(addr), 0))
        except OSError as exc:
            raise ValueError(f"{addr} is not an address of this host "
                             f"({exc.strerror or exc})") from None
    return str(addr)


def check_families(host: str, port: int, given: tuple[str, ...]) -> None:
    """ValueError (one line) when a given source address cannot reach the
    server: an IPv6 source for a server with IPv4 addresses only, or the
    other way round. Such a socket cannot be bound to it, and silently
    letting the kernel choose instead would not be what the flag asked."""
    if not given:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return  # the server's own probe says it cannot be reached
    families = {info[0] for info in infos}
    for source in given:
        family = socket.AF_INET6 if ":" in source else socket.AF_INET
        if family not in families:
            mine = "IPv6" if family == socket.AF_INET6 else "IPv4"
            theirs = "IPv6" if socket.AF_INET6 in families else "IPv4"
            raise ValueError(f"--source-address {source}: an {mine} address, but the server "
                             f"{host} has {theirs} addresses only; give an {theirs} address "
                             "of this host")


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback and ipaddress.ip_address(host).version == 4
    except ValueError:
        return host == "localhost"


def plan_sources(host: str, given: tuple[str, ...], concurrency: int,
                 ports: int) -> tuple[tuple[str, ...], str | None]:
    """The source addresses of a run's connections (empty: the kernel's
    choice) and a line saying why, when there are any."""
    if given:
        return given, f"Source addresses: {', '.join(given)} (--source-address)"
    if not is_loopback(host) or concurrency <= ports:
        return (), None
    n = min(254, math.ceil(concurrency / ports))
    chosen = tuple(f"127.0.0.{i}" for i in range(1, n + 1))
    return chosen, (f"Source addresses: {', '.join(chosen)} (automatic: {concurrency:,} streams "
                    f"to a loopback server, {ports:,} ephemeral ports an address)")


def out_of_ports(where: str, sources: int, ports: int) -> str:
    """The one-line reason of a connection refused for want of a local port."""
    have = f"{sources} source addresses × {ports:,}" if sources > 1 else f"{ports:,}"
    return (f"cannot connect to {where}: no free local port ({have} ephemeral ports, "
            f"{PORT_RANGE_FILE}; closed connections keep theirs about 60 s): add local "
            "addresses with --source-address ADDR (repeatable)")
