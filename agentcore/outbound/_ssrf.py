"""SSRF guard: which addresses outbound calls (webhooks, MCP servers) may reach, checked
when the URL is given and at connect time.

Subscribe time (:func:`validate_url`) gives the caller a clear answer: a 422 for a URL
that is not of the declared shape (``WEBHOOK_URL_PATTERN``, which the OpenAPI document states),
a 403 for one the server's policy refuses (``https`` for live keys, a refused address);
a host that does not resolve yet is accepted, as Svix accepts it. Connect time
(:class:`GuardedTransport`) is what actually protects: it resolves the host itself,
checks every address, and opens the socket to a checked address, so a DNS answer that
changes between the two (DNS rebinding) gains nothing. TLS still verifies the
certificate against the URL's host name, because only the TCP connect is redirected.
"""

from __future__ import annotations

import contextvars
import ipaddress
import re
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import httpcore
import httpx

from agentcore.errors import PermissionDenied, ValidationFailed
from agentcore.schema import WEBHOOK_URL_PATTERN

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]
"""``(host, port) -> addresses``; raises :class:`OSError` when the host does not resolve."""

MAX_URL_LENGTH = 2048

_URL = re.compile(WEBHOOK_URL_PATTERN)
DEFAULT_LIMITS = httpx.Limits(max_connections=64, max_keepalive_connections=16, keepalive_expiry=30)


def default_resolver(host: str, port: int) -> list[str]:
    """The host's TCP addresses from the system resolver, in its order, without repeats.

    :raises OSError: (``socket.gaierror``) the host does not resolve.
    """
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _networks(*items: tuple[str, str]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(cidr), label) for cidr, label in items)


# First match wins, so narrow entries come before the blocks that contain them.
_REFUSED_V4 = _networks(
    ("0.0.0.0/8", "an unspecified address"),
    ("127.0.0.0/8", "a loopback address"),
    ("10.0.0.0/8", "a private address"),
    ("172.16.0.0/12", "a private address"),
    ("192.168.0.0/16", "a private address"),
    ("100.64.0.0/10", "a shared (carrier-grade NAT) address"),
    ("169.254.169.254/32", "a cloud metadata address"),
    ("169.254.0.0/16", "a link-local address"),
    ("192.0.0.0/24", "a reserved address"),
    ("192.0.2.0/24", "a documentation address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("192.88.99.0/24", "a reserved address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("224.0.0.0/4", "a multicast address"),
    ("255.255.255.255/32", "a broadcast address"),
    ("240.0.0.0/4", "a reserved address"),
)
_REFUSED_V6 = _networks(
    ("::/128", "an unspecified address"),
    ("::1/128", "a loopback address"),
    ("::ffff:0:0/96", "an IPv4-mapped address"),
    ("::/8", "a reserved address"),
    ("64:ff9b:1::/48", "a reserved address"),
    ("100::/64", "a reserved address"),
    ("2001::/32", "a Teredo address"),
    ("2001:2::/48", "a benchmarking address"),
    ("2001:db8::/32", "a documentation address"),
    ("2002::/16", "a 6to4 address"),
    ("3fff::/20", "a documentation address"),
    ("fd00:ec2::254/128", "a cloud metadata address"),
    ("fc00::/7", "a unique-local address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),
    ("ff00::/8", "a multicast address"),
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv4-mapped, 6to4, Teredo (client) or NAT64 address carries."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _classify(address: IPAddress) -> str | None:
    """Why ``address`` is refused (e.g. ``"a loopback address"``), or ``None`` if global."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            inner = _classify(embedded)
            if inner is not None:
                return f"an IPv6 address embedding {inner}"
            if address in _NAT64:  # DNS64 gives IPv4-only hosts such addresses
                return None
        table: Sequence[tuple[IPNetwork, str]] = _REFUSED_V6
    else:
        table = _REFUSED_V4
    for network, label in table:
        if address in network:
            return label
    # The standard library's registry catches whatever special ranges the table lacks.
    return None if address.is_global else "a non-global address"


def _parse_ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.replace("%25", "%"))  # a URL-escaped IPv6 zone
    except ValueError:
        return None


class AddressPolicy:
    """Which IP addresses webhook deliveries may connect to.

    Every non-global address is refused (loopback, private, link-local and cloud
    metadata, carrier-grade NAT, multicast, unspecified, reserved, benchmarking,
    documentation, unique- and site-local, broadcast, IPv4-mapped, 6to4 and Teredo
    IPv6, and NAT64 addresses carrying a refused IPv4 address; NAT64 ones carrying a
    global address are allowed, since DNS64 networks reach every IPv4-only host that
    way), unless it lies in one of ``allowed_networks``. An allowed network exempts exactly the addresses it contains:
    allowing ``127.0.0.0/8`` does not allow ``::ffff:127.0.0.1``.

    :param allowed_networks: CIDRs exempt from the guard (tests allow ``127.0.0.0/8``).
    :raises ValueError: a CIDR is malformed.
    """

    def __init__(self, allowed_networks: Iterable[str] = ()) -> None:
        self.allowed_networks: tuple[IPNetwork, ...] = tuple(
            ipaddress.ip_network(cidr, strict=False) for cidr in allowed_networks
        )

    def __repr__(self) -> str:
        cidrs = [str(network) for network in self.allowed_networks]
        return f"AddressPolicy(allowed_networks={cidrs!r})"

    def refusal(self, ip: str | IPAddress) -> str | None:
        """Why ``ip`` is refused, as a phrase like ``"a loopback address"``; ``None`` if allowed.

        :raises ValueError: ``ip`` is not an IP address.
        """
        address = ip if not isinstance(ip, str) else ipaddress.ip_address(ip)
        if any(address in network for network in self.allowed_networks):
            return None
        return _classify(address)

    def is_allowed(self, ip: str | IPAddress) -> bool:
        """Whether deliveries may connect to ``ip``."""
        return self.refusal(ip) is None


class BlockedAddress(httpx.TransportError):
    """The SSRF guard refused to connect: the host resolves to a refused address."""


def _resolve(host: str, port: int, resolver: Resolver) -> list[IPAddress]:
    """The host's addresses (an IP literal is its own); :class:`OSError` if there are none."""
    literal = _parse_ip(host)
    if literal is not None:
        return [literal]
    addresses = []
    for text in resolver(host, port):
        address = _parse_ip(text)
        if address is None:
            raise OSError(f"resolver returned a non-address {text!r}")
        addresses.append(address)
    if not addresses:
        raise OSError("no addresses")
    return addresses


def _first_refusal(policy: AddressPolicy, addresses: Iterable[IPAddress]) -> str | None:
    return next(filter(None, map(policy.refusal, addresses)), None)


def validate_url(
    url: str,
    *,
    environment: Literal["test", "live"],
    policy: AddressPolicy,
    resolver: Resolver = default_resolver,
    param: str = "url",
    subject: str = "webhook",
) -> str:
    """Check a URL the server will call (a webhook's, an MCP server's) when it is given,
    and return it normalised.

    The URL must be of ``WEBHOOK_URL_PATTERN``'s shape (absolute ``http``/``https``, no
    credentials), at most 2048 characters; in the live environment ``https``; and every
    address its host resolves to must be allowed by ``policy``. A host that does not
    resolve (yet) is accepted: every delivery resolves it again and checks what it finds,
    and fails while it does not resolve. A fragment is dropped: it is never sent anyway.

    :param param: the request field the errors name.
    :param subject: what the URL is for, as the live-mode error names it.
    :raises ValidationFailed: (422) naming ``param``, code ``invalid_url``.
    :raises PermissionDenied: (403) naming ``param``, code ``https_required`` (a live key,
        an ``http`` URL) or ``url_not_allowed`` (an address ``policy`` refuses).
    """

    def invalid(detail: str) -> ValidationFailed:
        return ValidationFailed(detail, code="invalid_url", param=param)

    def refused(detail: str, code: str) -> PermissionDenied:
        return PermissionDenied(detail, code=code, param=param)

    if not isinstance(url, str) or not url:
        raise invalid("The URL must be a non-empty string.")
    if len(url) > MAX_URL_LENGTH:
        raise invalid(f"The URL must be at most {MAX_URL_LENGTH} characters.")
    if any(char.isspace() or not char.isprintable() for char in url):
        raise invalid("The URL must not contain whitespace or control characters.")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, UnicodeError):
        raise invalid("The URL is malformed.") from None
    if parsed.scheme not in ("http", "https"):
        raise invalid("The URL must be an absolute http or https URL.")
    if parsed.userinfo:
        raise invalid("The URL must not contain a user name or password.")
    if not _URL.match(url):
        raise invalid(
            "The URL's host must be a DNS name (an internationalised one in its xn-- form),"
            " an IPv4 address or a bracketed IPv6 address, its port 1-65535, and the rest"
            " printable ASCII (percent-encode anything else)."
        )
    if environment == "live" and parsed.scheme != "https":
        raise refused(f"Live-mode {subject} URLs must use https.", "https_required")
    host = parsed.raw_host.decode("ascii")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        addresses = _resolve(host, port, resolver)
    except (OSError, UnicodeError):
        addresses = []  # not (yet) in the DNS: each delivery resolves it and checks again
    reason = _first_refusal(policy, addresses)
    if reason is not None:
        verb = "is" if _parse_ip(host) is not None else "resolves to"
        raise refused(f"The URL's host {verb} {reason}.", "url_not_allowed")
    return str(parsed.copy_with(fragment=None))


# --- connect time ------------------------------------------------------------------

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "agentcore_webhook_deadline", default=None
)


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Bound every socket operation of guarded transports in this context to ``seconds``.

    httpx time-outs apply per operation, so a receiver trickling one byte at a time
    could hold a connection for ever; inside this block each connect, read and write
    gets at most the time left, and fails with the matching time-out once it is spent.
    Nested blocks keep the earlier deadline.
    """
    end = time.monotonic() + seconds
    outer = _DEADLINE.get()
    token = _DEADLINE.set(end if outer is None else min(outer, end))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _bounded(timeout: float | None, expired: type[httpcore.TimeoutException]) -> float | None:
    end = _DEADLINE.get()
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:  # a zero socket time-out would mean non-blocking, not "expired"
        raise expired("the attempt's deadline has passed")
    return left if timeout is None else min(timeout, left)


def _checked_addresses(
    host: str, port: int, policy: AddressPolicy, resolver: Resolver
) -> list[IPAddress]:
    try:
        addresses = _resolve(host, port, resolver)
    except (OSError, UnicodeError) as exc:
        raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
    reason = _first_refusal(policy, addresses)
    if reason is not None:
        raise BlockedAddress(f"blocked by SSRF guard: {host} resolves to {reason}")
    return addresses


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _bounded(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _GuardedBackend(httpcore.NetworkBackend):
    def __init__(self, policy: AddressPolicy, resolver: Resolver) -> None:
        self._policy = policy
        self._resolver = resolver
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = _checked_addresses(host, port, self._policy, self._resolver)
        failure: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for address in addresses:  # connect to what was checked, never look the host up again
            try:
                stream = self._backend.connect_tcp(
                    str(address),
                    port,
                    timeout=_bounded(timeout, httpcore.ConnectTimeout),
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
                continue
            return _DeadlineStream(stream)
        assert failure is not None
        raise failure

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        raise BlockedAddress("blocked by SSRF guard: unix sockets are not allowed")

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def _ssl_context(verify: ssl.SSLContext | bool) -> ssl.SSLContext:
    if isinstance(verify, ssl.SSLContext):
        return verify
    return httpx.create_ssl_context(verify=verify, trust_env=False)


class GuardedTransport(httpx.HTTPTransport):
    """An httpx transport whose every TCP connection passes the SSRF guard.

    For each new connection it resolves the host with ``resolver``, refuses with
    :class:`BlockedAddress` if any address is refused by ``policy``, and connects to
    the checked addresses only. The URL, ``Host`` header, TLS SNI and certificate
    check keep the original host name. Honours :func:`deadline`. Proxies from the
    environment are never used.

    :param verify: as for httpx: ``True``, ``False`` or an :class:`ssl.SSLContext`.
    """

    def __init__(
        self,
        policy: AddressPolicy,
        *,
        resolver: Resolver = default_resolver,
        verify: ssl.SSLContext | bool = True,
        limits: httpx.Limits = DEFAULT_LIMITS,
    ) -> None:
        context = _ssl_context(verify)
        super().__init__(verify=context, trust_env=False, limits=limits)
        # httpx has no public hook for a network backend, so the pool it just built is
        # replaced by one with the same settings whose connections go through the guard.
        self._pool = httpcore.ConnectionPool(
            ssl_context=context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_GuardedBackend(policy, resolver),
        )


__all__ = [
    "DEFAULT_LIMITS",
    "MAX_URL_LENGTH",
    "AddressPolicy",
    "BlockedAddress",
    "GuardedTransport",
    "Resolver",
    "default_resolver",
    "deadline",
    "validate_url",
]
