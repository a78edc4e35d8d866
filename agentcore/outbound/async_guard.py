"""The SSRF guard for async httpx2 clients (the official MCP SDK's HTTP client).

:class:`AsyncGuardedTransport` is the async twin of :class:`GuardedTransport`: every
TCP connection resolves its host, is refused if any address is, and connects to the
checked addresses only (so DNS rebinding gains nothing). It also bounds how many bytes
all of its responses together may bring (``max_bytes``), so a server that answers
without end cannot fill the memory. Imported only where the MCP SDK is installed.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

import anyio.to_thread
import httpcore2
import httpx2

from agentcore.outbound._ssrf import (
    AddressPolicy,
    IPAddress,
    Resolver,
    _first_refusal,
    _resolve,
    default_resolver,
)


class _Budget:
    """Bytes the responses of one transport may still bring."""

    def __init__(self, max_bytes: int) -> None:
        self.left = max_bytes
        self.max_bytes = max_bytes

    def spend(self, data: bytes) -> bytes:
        self.left -= len(data)
        if self.left < 0:
            raise httpcore2.ReadError(f"the server sent more than {self.max_bytes} bytes")
        return data


class _BudgetedStream(httpcore2.AsyncNetworkStream):
    def __init__(self, stream: httpcore2.AsyncNetworkStream, budget: _Budget) -> None:
        self._stream = stream
        self._budget = budget

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._budget.spend(await self._stream.read(max_bytes, timeout))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        stream = await self._stream.start_tls(ssl_context, server_hostname, timeout)
        return _BudgetedStream(stream, self._budget)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _AsyncGuardedBackend(httpcore2.AsyncNetworkBackend):
    def __init__(self, policy: AddressPolicy, resolver: Resolver, budget: _Budget) -> None:
        self._policy = policy
        self._resolver = resolver
        self._budget = budget
        self._backend = httpcore2.AnyIOBackend()

    async def _addresses(self, host: str, port: int) -> list[IPAddress]:
        try:  # the resolver blocks (getaddrinfo): off the event loop
            addresses = await anyio.to_thread.run_sync(_resolve, host, port, self._resolver)
        except (OSError, UnicodeError) as exc:
            raise httpcore2.ConnectError(f"cannot resolve {host}: {exc}") from exc
        reason = _first_refusal(self._policy, addresses)
        if reason is not None:
            raise httpcore2.ConnectError(f"blocked by SSRF guard: {host} resolves to {reason}")
        return addresses

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        failure: Exception | None = None
        for address in await self._addresses(host, port):  # never looked up again
            try:
                stream = await self._backend.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
                continue
            return _BudgetedStream(stream, self._budget)
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("blocked by SSRF guard: unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class AsyncGuardedTransport(httpx2.AsyncHTTPTransport):
    """An httpx2 transport whose every TCP connection passes the SSRF guard, and whose
    responses together bring at most ``max_bytes`` (then a ``ReadError``).

    Refused addresses fail as a ``ConnectError`` that says so. Proxies from the
    environment are never used; TLS verifies the certificate against the URL's host.

    :param policy: which addresses may be reached.
    :param max_bytes: the bytes every response read through this transport may bring.
    :param resolver: ``(host, port) -> addresses`` (the system resolver by default).
    :param ssl_context: verifies servers' certificates (the system's CAs by default).
    """

    def __init__(
        self,
        policy: AddressPolicy,
        *,
        max_bytes: int,
        resolver: Resolver = default_resolver,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        # a context loads the CA bundle (tens of milliseconds): pass one to reuse it
        context = ssl_context or httpx2.create_ssl_context(trust_env=False)
        super().__init__(verify=context, trust_env=False)
        # as for GuardedTransport: httpx2 has no public hook for a network backend, so
        # the pool it built is replaced by one whose connections go through the guard
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=context,
            max_connections=8,
            max_keepalive_connections=8,
            network_backend=_AsyncGuardedBackend(policy, resolver, _Budget(max_bytes)),
        )


__all__ = ["AsyncGuardedTransport"]
