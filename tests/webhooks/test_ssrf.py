"""The SSRF guard's address policy and subscribe-time URL check.

Connect-time checks against a real server are in test_webhook_sender.py.
"""

from __future__ import annotations

import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentcore.errors import PermissionDenied, ValidationFailed
from agentcore.outbound._ssrf import AddressPolicy, Resolver, validate_url
from agentcore.schema import WEBHOOK_URL_PATTERN

REFUSED = [
    ("127.0.0.1", "a loopback address"),
    ("127.255.255.254", "a loopback address"),
    ("10.1.2.3", "a private address"),
    ("172.16.5.4", "a private address"),
    ("172.31.255.255", "a private address"),
    ("192.168.1.1", "a private address"),
    ("169.254.169.254", "a cloud metadata address"),
    ("169.254.10.10", "a link-local address"),
    ("100.64.0.1", "a shared (carrier-grade NAT) address"),
    ("100.127.255.254", "a shared (carrier-grade NAT) address"),
    ("224.0.0.1", "a multicast address"),
    ("239.255.255.250", "a multicast address"),
    ("0.0.0.0", "an unspecified address"),
    ("0.1.2.3", "an unspecified address"),
    ("240.0.0.1", "a reserved address"),
    ("192.0.0.9", "a reserved address"),
    ("255.255.255.255", "a broadcast address"),
    ("198.18.0.1", "a benchmarking address"),
    ("198.19.255.1", "a benchmarking address"),
    ("192.0.2.1", "a documentation address"),
    ("198.51.100.7", "a documentation address"),
    ("203.0.113.9", "a documentation address"),
    ("::1", "a loopback address"),
    ("::", "an unspecified address"),
    ("fe80::1", "a link-local address"),
    ("fc00::1", "a unique-local address"),
    ("fd12:3456::1", "a unique-local address"),
    ("fd00:ec2::254", "a cloud metadata address"),
    ("fec0::1", "a site-local address"),
    ("ff02::1", "a multicast address"),
    ("2001:db8::1", "a documentation address"),
    ("2001:2::1", "a benchmarking address"),
    ("100::1", "a reserved address"),
    ("::7f00:1", "a reserved address"),  # IPv4-compatible (deprecated)
    ("::ffff:93.184.216.34", "an IPv4-mapped address"),
    ("::ffff:127.0.0.1", "an IPv6 address embedding a loopback address"),
    ("::ffff:10.0.0.1", "an IPv6 address embedding a private address"),
    ("2002:7f00:1::1", "an IPv6 address embedding a loopback address"),  # 6to4
    ("2002:a9fe:a9fe::1", "an IPv6 address embedding a cloud metadata address"),
    ("2002:5db8:d822::1", "a 6to4 address"),
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", "an IPv6 address embedding a loopback address"),
    ("2001:0:4136:e378:8000:63bf:a2ec:27cb", "a Teredo address"),  # client 93.19.216.52
    ("64:ff9b::7f00:1", "an IPv6 address embedding a loopback address"),  # NAT64
    ("64:ff9b::a00:1", "an IPv6 address embedding a private address"),
]
ALLOWED = ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "64:ff9b::5db8:d822"]
DEFAULT = AddressPolicy()


def literal(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def resolver_for(mapping: dict[str, list[str]]) -> Resolver:
    def resolve(host: str, port: int) -> list[str]:
        if host not in mapping:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return mapping[host]

    return resolve


def refused(url: str, **kwargs: object) -> ValidationFailed:
    """The 422 of a URL that is not of the declared shape."""
    kwargs.setdefault("environment", "test")
    kwargs.setdefault("policy", DEFAULT)
    with pytest.raises(ValidationFailed) as info:
        validate_url(url, **kwargs)  # type: ignore[arg-type]
    assert info.value.param == "url"
    assert info.value.status == 422
    return info.value


def forbidden(url: str, **kwargs: object) -> PermissionDenied:
    """The 403 of a URL the server's policy refuses (its address, http for live)."""
    kwargs.setdefault("environment", "test")
    kwargs.setdefault("policy", DEFAULT)
    with pytest.raises(PermissionDenied) as info:
        validate_url(url, **kwargs)  # type: ignore[arg-type]
    assert info.value.param == "url"
    assert info.value.status == 403
    return info.value


@pytest.mark.parametrize(("address", "label"), REFUSED)
def test_policy_refuses_every_non_global_class(address: str, label: str) -> None:
    assert DEFAULT.refusal(address) == label
    assert not DEFAULT.is_allowed(address)


@pytest.mark.parametrize("address", ALLOWED)
def test_policy_allows_global_addresses(address: str) -> None:
    assert DEFAULT.refusal(address) is None
    assert DEFAULT.is_allowed(address)


@pytest.mark.parametrize(("address", "label"), REFUSED)
def test_literal_address_in_url_refused(address: str, label: str) -> None:
    error = forbidden(f"http://{literal(address)}:8080/hook")
    assert error.code == "url_not_allowed"
    assert error.detail == f"The URL's host is {label}."


@pytest.mark.parametrize(("address", "label"), REFUSED)
def test_host_name_resolving_to_refused_address(address: str, label: str) -> None:
    resolver = resolver_for({"hooks.example.com": [address]})
    error = forbidden("https://hooks.example.com/hook", resolver=resolver)
    assert error.code == "url_not_allowed"
    assert error.detail == f"The URL's host resolves to {label}."
    assert address not in error.detail


@pytest.mark.parametrize("address", ALLOWED)
def test_host_name_resolving_to_public_address_allowed(address: str) -> None:
    resolver = resolver_for({"hooks.example.com": [address]})
    url = validate_url(
        "https://hooks.example.com/hook", environment="live", policy=DEFAULT, resolver=resolver
    )
    assert url == "https://hooks.example.com/hook"


def test_one_refused_address_among_good_ones_refuses() -> None:
    resolver = resolver_for({"hooks.example.com": ["93.184.216.34", "10.0.0.7"]})
    error = forbidden("https://hooks.example.com/", resolver=resolver)
    assert error.code == "url_not_allowed"
    assert "private" in error.detail


@pytest.mark.parametrize("url", ["http://127.0.0.1/", "http://localhost/", "http://[::1]/"])
def test_default_configuration_refuses_this_machine(url: str) -> None:
    assert forbidden(url).code == "url_not_allowed"  # the real system resolver


def test_allowed_cidr_overrides_the_refusal() -> None:
    policy = AddressPolicy(["127.0.0.0/8"])
    assert validate_url("http://127.0.0.1:9/x", environment="test", policy=policy) == (
        "http://127.0.0.1:9/x"
    )
    resolver = resolver_for({"receiver.test": ["127.0.0.2"]})
    validate_url("http://receiver.test/", environment="test", policy=policy, resolver=resolver)
    # exactly the listed addresses: not the mapped form, not IPv6 loopback, not 10/8
    for address in ("::ffff:127.0.0.1", "::1", "10.0.0.1"):
        assert not policy.is_allowed(address)
    assert AddressPolicy(["::ffff:0:0/96"]).is_allowed("::ffff:127.0.0.1")


def test_malformed_allowed_network_rejected() -> None:
    with pytest.raises(ValueError):
        AddressPolicy(["127.0.0.300/8"])


def test_live_requires_https_test_allows_http() -> None:
    resolver = resolver_for({"hooks.example.com": ["93.184.216.34"]})
    error = forbidden("http://hooks.example.com/", environment="live", resolver=resolver)
    assert error.code == "https_required"
    assert validate_url(
        "http://hooks.example.com/", environment="test", policy=DEFAULT, resolver=resolver
    ) == ("http://hooks.example.com/")


@pytest.mark.parametrize(
    "url",
    [
        "",
        "hooks.example.com/hook",
        "/hook",
        "ftp://hooks.example.com/",
        "javascript:alert(1)",
        "file:///etc/passwd",
        "http://user:pw@hooks.example.com/",
        "http://user@hooks.example.com/",
        "http:///hook",
        "http://",
        "http://hooks.example.com:99999/",
        "http://hooks.example.com:0/",
        "http://hooks example.com/",
        "http://hooks.example.com/\n",
        "http://[::1/",
        "https://xn--/hook",  # an IDNA label that does not decode
        "https://hooks.example.com/" + "a" * 2030,
    ],
)
def test_malformed_urls_refused(url: str) -> None:
    resolver = resolver_for({"hooks.example.com": ["93.184.216.34"]})
    assert refused(url, resolver=resolver).code == "invalid_url"


def test_url_of_exactly_max_length_accepted() -> None:
    resolver = resolver_for({"hooks.example.com": ["93.184.216.34"]})
    url = "https://hooks.example.com/" + "a" * (2048 - 26)
    assert len(url) == 2048
    assert validate_url(url, environment="live", policy=DEFAULT, resolver=resolver) == url


@pytest.mark.parametrize("answer", [None, []])
def test_a_host_that_does_not_resolve_yet_is_accepted(answer: list[str] | None) -> None:
    """As at Svix: its DNS may come later; each delivery resolves and checks it anew."""
    mapping = {} if answer is None else {"nowhere.example": answer}
    url = "https://nowhere.example/"
    checked = validate_url(url, environment="live", policy=DEFAULT, resolver=resolver_for(mapping))
    assert checked == url


@settings(max_examples=300, deadline=None)
@given(st.from_regex(WEBHOOK_URL_PATTERN, fullmatch=True))
def test_every_url_of_the_declared_shape_is_accepted(url: str) -> None:
    """The OpenAPI document declares WEBHOOK_URL_PATTERN: whatever matches it passes the
    shape checks (no 422), and a host without DNS is no refusal either."""
    try:
        validate_url(
            url,
            environment="test",
            policy=AddressPolicy(["0.0.0.0/0", "::/0"]),
            resolver=resolver_for({}),
        )
    except ValidationFailed as error:
        raise AssertionError(f"{url!r}: {error.detail}") from None


def test_url_is_normalised_and_fragment_dropped() -> None:
    resolver = resolver_for(
        {"hooks.example.com": ["93.184.216.34"], "xn--bcher-kva.example": ["93.184.216.34"]}
    )
    assert (
        validate_url(
            "HTTPS://Hooks.Example.COM/In?x=1#frag",
            environment="live",
            policy=DEFAULT,
            resolver=resolver,
        )
        == "https://hooks.example.com/In?x=1"
    )
    # an internationalised name is given in its xn-- form, which the declared shape holds
    assert (
        validate_url(
            "https://xn--bcher-kva.example/", environment="live", policy=DEFAULT, resolver=resolver
        )
        == "https://xn--bcher-kva.example/"
    )
    assert "xn--" in refused("https://bücher.example/", resolver=resolver).detail
