"""URLs a merchant gives payorch to send people to: checked as they will be used, never repaired."""

from __future__ import annotations

import pytest

from payorch.values.web_urls import is_loopback_host, redirect_url_problem, website_url_problem

# --- redirect URLs --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://shop.example/ok",
        "https://shop.example:8443/return?order=1001&status=ok#top",
        "HTTPS://Shop.Example/OK",
        "https://xn--shp-sna.example/caf%C3%A9",
        "https://shop.example./ok",
        "https://203.0.113.7/ok",
        "https://[2001:db8::1]/ok",
        "https://shop.example/a;b,c!$'()*+=~@:",
    ],
)
def test_https_url_is_a_redirect_url(url: str) -> None:
    assert redirect_url_problem(url) is None


@pytest.mark.parametrize(
    "url",
    [
        "https://shop.example/ok\r\nSet-Cookie: a=b",
        "https://shop.example/ok\r\n",
        "https://shop.example/ok\n",
        "https://shop.example/\x00",
        "https://shop.example/\x1b",
        "https://shop.example/\x7f",
        "https://shop.example/\x85",
        "https://shop.example/\u200bok",
        "https://shop.example/\u202eko",
        "https://shop.example/\ufeff",
    ],
)
def test_url_with_control_or_invisible_characters_is_refused(url: str) -> None:
    assert "control or invisible" in (redirect_url_problem(url) or "")


@pytest.mark.parametrize(
    "url",
    [
        " https://shop.example/ok",
        "https://shop.example/ok ",
        "https://shop.example/o k",
        "https://shop.example/\u00a0",
        "https://shop.example/\u2028",
        "https://shop.example/\u3000",
    ],
)
def test_url_with_white_space_is_refused(url: str) -> None:
    assert "white space" in (redirect_url_problem(url) or "")


def test_tab_is_refused() -> None:
    assert redirect_url_problem("https://shop.example/\tok") is not None


@pytest.mark.parametrize(
    "url",
    [
        "https://sh\u00f6p.example/",
        "https://shop.example/caf\u00e9",
        "https://shop.example/<script>",
        'https://shop.example/"',
        "https://shop.example/{x}",
        "https://shop.example\\@evil.example/",
        "https://shop.example/%zz",
        "https://shop.example/100%",
    ],
)
def test_url_that_is_not_written_as_rfc_3986_requires_is_refused(url: str) -> None:
    assert redirect_url_problem(url) is not None


@pytest.mark.parametrize(
    "url",
    [
        "",
        "/ok",
        "shop.example/ok",
        "//shop.example/ok",
        "https:shop.example",
        "https:///ok",
        "ftp://shop.example/ok",
        "javascript:alert(1)",
        "https://user:secret@shop.example/ok",
        "https://shop.example@evil.example/ok",
        "https://shop.example:99999/",
        "https://shop.example:port/",
        "https://[::1/",
        "https://[shop.example]/",
        "https://-shop.example/",
        "https://shop..example/",
    ],
)
def test_url_that_is_not_an_absolute_https_url_with_a_host_is_refused(url: str) -> None:
    assert redirect_url_problem(url) is not None


@pytest.mark.parametrize(
    "url",
    ["http://localhost:3000/ok", "http://127.0.0.1/ok", "http://127.8.9.10:8080/ok", "http://[::1]:8080/ok"],
)
def test_http_redirect_url_to_a_loopback_host_is_accepted(url: str) -> None:
    assert redirect_url_problem(url) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://shop.example/ok",
        "http://10.0.0.1/ok",
        "http://localhost.shop.example/ok",
        "http://128.0.0.1/ok",
        "http://[::2]/ok",
    ],
)
def test_http_redirect_url_to_any_other_host_is_refused(url: str) -> None:
    assert "https" in (redirect_url_problem(url) or "")


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.255.255.254", "::1"])
def test_localhost_127_and_ipv6_loopback_are_loopback(host: str) -> None:
    assert is_loopback_host(host)


@pytest.mark.parametrize(
    "host",
    ["localhost.", "127.1", "0.0.0.0", "::", "shop.example", ""],  # noqa: S104 - compared, never bound
)
def test_other_hosts_are_not_loopback(host: str) -> None:
    assert not is_loopback_host(host)


# --- websites -------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["https://acme.example", "http://acme.example", "http://acme.example/about"])
def test_http_or_https_website_is_accepted(url: str) -> None:
    assert website_url_problem(url) is None


@pytest.mark.parametrize(
    "url",
    [
        " https://acme.example",
        "https://acme.example\r\n",
        "https://acme.example/\u200b",
        "ftp://acme.example",
        "acme.example",
        "https://user@acme.example",
    ],
)
def test_website_with_white_space_control_characters_or_no_http_scheme_is_refused(url: str) -> None:
    assert website_url_problem(url) is not None
