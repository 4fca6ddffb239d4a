"""The SSRF guard on webhook URLs. No network needed: IP literals skip DNS, `localhost` resolves from
/etc/hosts, and `.invalid` never resolves (RFC 6761)."""

from __future__ import annotations

import ipaddress

import pytest

from payorch.outbound.ssrf import (
    UnresolvableHost,
    UnsafeWebhookUrl,
    check_webhook_url,
    non_public_kind,
    resolve_public_addresses,
    webhook_host_and_port,
)

NON_PUBLIC_URLS = [
    "https://127.0.0.1/hooks",
    "https://127.1/hooks",  # resolves to 127.0.0.1
    "https://[::1]/hooks",
    "https://10.0.0.1/hooks",
    "https://172.16.0.1/hooks",
    "https://192.168.1.1/hooks",
    "https://169.254.169.254/latest/meta-data/",
    "https://224.0.0.1/hooks",
    "https://0.0.0.0/hooks",
    "https://0.1.2.3/hooks",
    "https://100.64.0.1/hooks",
    "https://240.0.0.1/hooks",
    "https://[::]/hooks",
    "https://[fe80::1]/hooks",
    "https://[fc00::1]/hooks",
    "https://[ff02::1]/hooks",
    "https://[::ffff:127.0.0.1]/hooks",
    "https://[::ffff:169.254.169.254]/hooks",
    "https://[2002:a00:1::]/hooks",  # 6to4 of 10.0.0.1
    "https://[64:ff9b::a9fe:a9fe]/hooks",  # NAT64 of 169.254.169.254
    "https://localhost/hooks",
    "https://localhost:8443/hooks",
]


def test_https_url_with_port_and_query_has_a_safe_shape() -> None:
    webhook_host_and_port("https://hooks.example.com:8443/payorch?tenant=7")


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/",
        "ftp://hooks.example.com/",
        "hooks.example.com/hooks",
        "//hooks.example.com/",
    ],
)
def test_url_that_is_not_https_is_refused(url: str) -> None:
    with pytest.raises(UnsafeWebhookUrl, match="https"):
        webhook_host_and_port(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://user:pass@hooks.example.com/",
        "https://user@hooks.example.com/",
        "https://@hooks.example.com/",
        "https://hooks.example.com\\@127.0.0.1/",
    ],
)
def test_url_with_userinfo_is_refused(url: str) -> None:
    with pytest.raises(UnsafeWebhookUrl, match="user name or password"):
        webhook_host_and_port(url)


@pytest.mark.parametrize(
    "url", ["https:///hooks", "https://:443/hooks", "https://a b/", "https://-bad-.example/", "https://h%2f/"]
)
def test_url_without_a_valid_host_is_refused(url: str) -> None:
    with pytest.raises(UnsafeWebhookUrl, match="host"):
        webhook_host_and_port(url)


@pytest.mark.parametrize("url", ["https://hooks.example.com:0/", "https://hooks.example.com:65536/"])
def test_url_with_port_out_of_range_is_refused(url: str) -> None:
    with pytest.raises(UnsafeWebhookUrl, match="port"):
        webhook_host_and_port(url)


def test_url_over_2048_characters_is_refused() -> None:
    base = "https://hooks.example.com/"
    webhook_host_and_port(base + "a" * (2048 - len(base)))
    with pytest.raises(UnsafeWebhookUrl, match="2048"):
        webhook_host_and_port(base + "a" * (2049 - len(base)))


def test_host_and_port_are_what_the_client_connects_to() -> None:
    assert webhook_host_and_port("https://Hooks.Example.COM/x") == ("hooks.example.com", 443)
    assert webhook_host_and_port("https://[2001:db8::1]:8443/x") == ("2001:db8::1", 8443)
    assert webhook_host_and_port("https://bücher.example/") == ("xn--bcher-kva.example", 443)


@pytest.mark.parametrize("url", NON_PUBLIC_URLS)
async def test_url_reaching_a_non_public_address_is_refused(url: str) -> None:
    with pytest.raises(UnsafeWebhookUrl, match="non-public address"):
        await check_webhook_url(url, allow_private_networks=False)


@pytest.mark.parametrize("url", NON_PUBLIC_URLS)
async def test_url_reaching_a_non_public_address_is_allowed_with_private_networks(url: str) -> None:
    await check_webhook_url(url, allow_private_networks=True)


async def test_public_ip_literal_is_accepted_without_dns() -> None:
    await check_webhook_url("https://93.184.216.34/hooks", allow_private_networks=False)
    await check_webhook_url(
        "https://[2606:2800:220:1:248:1893:25c8:1946]/hooks", allow_private_networks=False
    )


async def test_ip_literal_resolves_to_itself() -> None:
    addresses = await resolve_public_addresses("93.184.216.34", 443, allow_private_networks=False)
    assert addresses == ["93.184.216.34"]


async def test_localhost_resolves_to_loopback_addresses_when_private_networks_are_allowed() -> None:
    addresses = await resolve_public_addresses("localhost", 443, allow_private_networks=True)
    assert addresses
    assert all(ipaddress.ip_address(address).is_loopback for address in addresses)


async def test_unresolvable_host_is_refused() -> None:
    with pytest.raises(UnsafeWebhookUrl, match="does not resolve"):
        await check_webhook_url("https://no-such-host.invalid/hooks", allow_private_networks=False)


async def test_unresolvable_host_is_refused_even_with_private_networks() -> None:
    with pytest.raises(UnsafeWebhookUrl, match="does not resolve"):
        await check_webhook_url("https://no-such-host.invalid/hooks", allow_private_networks=True)


async def test_unresolvable_host_is_said_not_to_resolve_from_this_server() -> None:
    with pytest.raises(UnresolvableHost) as refused:
        await check_webhook_url("https://no-such-host.invalid/hooks", allow_private_networks=False)
    assert refused.value.host == "no-such-host.invalid"
    assert str(refused.value).startswith(
        "webhook URL host 'no-such-host.invalid' does not resolve from this server ("
    )


@pytest.mark.parametrize(
    "url", ["https://127.0.0.1:8787/hooks", "https://[::1]/hooks", "https://localhost/hooks"]
)
async def test_a_loopback_url_refused_names_the_setting_that_allows_it(url: str) -> None:
    with pytest.raises(UnsafeWebhookUrl) as refused:
        await check_webhook_url(url, allow_private_networks=False)
    assert "non-public address (loopback)" in str(refused.value)
    assert "set webhooks.allow_loopback = true to allow it (local development only)" in str(refused.value)


@pytest.mark.parametrize("url", ["https://10.0.0.1/hooks", "https://169.254.169.254/latest"])
async def test_a_private_url_refused_names_the_setting_that_allows_it(url: str) -> None:
    with pytest.raises(UnsafeWebhookUrl, match=r"set webhooks\.allow_private_networks = true to allow it"):
        await check_webhook_url(url, allow_private_networks=False)


@pytest.mark.parametrize(
    "url", ["https://127.0.0.1:8787/hooks", "https://[::1]/hooks", "https://localhost:8787/webhooks"]
)
async def test_allow_loopback_allows_loopback_addresses(url: str) -> None:
    await check_webhook_url(url, allow_private_networks=False, allow_loopback=True)


@pytest.mark.parametrize(
    "url", ["https://10.0.0.1/hooks", "https://169.254.169.254/latest", "https://[::ffff:127.0.0.1]/hooks"]
)
async def test_allow_loopback_allows_no_other_non_public_address(url: str) -> None:
    with pytest.raises(UnsafeWebhookUrl, match=r"webhooks\.allow_private_networks"):
        await check_webhook_url(url, allow_private_networks=False, allow_loopback=True)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8787/webhooks", "http://localhost:3000/hooks", "http://[::1]/hooks"]
)
async def test_plain_http_to_a_loopback_host_is_allowed_with_allow_loopback(url: str) -> None:
    await check_webhook_url(url, allow_private_networks=False, allow_loopback=True)
    assert webhook_host_and_port(url, allow_loopback=True)[1] in (80, 3000, 8787)


@pytest.mark.parametrize("allow_private_networks", [False, True])
async def test_plain_http_to_a_loopback_host_is_refused_naming_allow_loopback(
    allow_private_networks: bool,
) -> None:
    with pytest.raises(UnsafeWebhookUrl, match=r"must use https.*webhooks\.allow_loopback = true"):
        await check_webhook_url("http://127.0.0.1:8787/hooks", allow_private_networks=allow_private_networks)


@pytest.mark.parametrize("url", ["http://hooks.example.com/", "http://10.0.0.1/", "http://127.0.0.1.nip.io/"])
def test_plain_http_to_any_other_host_is_refused_even_with_allow_loopback(url: str) -> None:
    with pytest.raises(UnsafeWebhookUrl, match="must use https"):
        webhook_host_and_port(url, allow_loopback=True)


def test_plain_http_defaults_to_port_80() -> None:
    assert webhook_host_and_port("http://localhost/x", allow_loopback=True) == ("localhost", 80)


async def test_refusal_of_a_name_does_not_reveal_the_address_it_resolves_to() -> None:
    # Merchants must not learn payorch's internal DNS answers from the 400 message.
    with pytest.raises(UnsafeWebhookUrl) as refused:
        await check_webhook_url("https://localhost/", allow_private_networks=False)
    assert "127.0.0.1" not in str(refused.value) and "::1" not in str(refused.value)


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("169.254.169.254", "link-local"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),  # noqa: S104 - an address judged, not bound
        ("100.64.0.1", "carrier-grade NAT or this-network"),
        ("::ffff:10.0.0.1", "private, inside the IPv6 address ::ffff:a00:1"),
    ],
)
def test_address_kind_names_why_it_is_not_public(address: str, kind: str) -> None:
    assert non_public_kind(ipaddress.ip_address(address)) == kind


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:2800:220:1:248:1893:25c8:1946"])
def test_public_address_has_no_non_public_kind(address: str) -> None:
    assert non_public_kind(ipaddress.ip_address(address)) is None
