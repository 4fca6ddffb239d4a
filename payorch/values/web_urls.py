"""Which URLs a merchant may give payorch to send people to: checkout redirects and a website.

A URL is checked exactly as it will be used, never trimmed or repaired: a redirect URL ends up in a
`Location` header, where a CR or LF would split the response and a non-ASCII character cannot be
written at all. So a URL must already be in its encoded form (RFC 3986): percent-encoded path and
query, punycode (`xn--`) host names.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from urllib.parse import SplitResult, urlsplit

# RFC 3986: unreserved and reserved characters, and `%` of a percent-encoding. Nothing else may
# appear in a URL unencoded (no space, quote, `<`, `>`, backslash, `{`, `|`, ...).
_URL_CHARACTERS = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*")
_BROKEN_PERCENT_ENCODING = re.compile(r"%(?![0-9A-Fa-f]{2})")
_HOST_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
LOOPBACK_NAME = "localhost"


def _invisible_or_control(character: str) -> bool:
    # Below U+0020 and U+007F (category Cc), and Unicode format characters (Cf: zero-width space,
    # bidirectional overrides, ...): never part of a URL anyone meant to type.
    return unicodedata.category(character) in ("Cc", "Cf")


def _text_problem(url: str) -> str | None:
    for character in url:
        if _invisible_or_control(character):
            return f"must not contain control or invisible characters (found U+{ord(character):04X})"
        if character.isspace():
            return f"must not contain white space (found U+{ord(character):04X}): percent-encode it"
    if not url.isascii():
        return "must be ASCII: percent-encode other characters and write host names in punycode (xn--)"
    if not _URL_CHARACTERS.fullmatch(url):
        unexpected = next(character for character in url if not _URL_CHARACTERS.fullmatch(character))
        return f"must not contain {unexpected!r} unencoded: percent-encode it"
    if _BROKEN_PERCENT_ENCODING.search(url):
        return "has a '%' that does not start a percent-encoding (%XX)"
    return None


def _is_host_name(host: str) -> bool:
    if len(host) > 253:
        return False
    return all(_HOST_LABEL.fullmatch(label) for label in host.removesuffix(".").split("."))


def _host_problem(parts: SplitResult) -> str | None:
    host = parts.hostname  # lower-cased, IPv6 brackets removed
    if not host:
        return "must be an absolute URL with a host"
    if "@" in parts.netloc:
        return "must not contain a user name or password"
    try:
        parts.port  # noqa: B018 - reading it is the check: a port that is not a number raises
    except ValueError:
        return "has a port that is not a number from 0 to 65535"
    if "[" in parts.netloc:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return "has a bracketed host that is not an IPv6 address"
        return None
    if not _is_host_name(host):
        return "has a host that is not a valid host name or IP address"
    return None


def _parsed(url: str) -> SplitResult | str:
    """The URL's parts, or what is wrong with its text."""
    problem = _text_problem(url)
    if problem is not None:
        return problem
    try:
        return urlsplit(url)
    except ValueError:  # an unbalanced `[` of an IPv6 host, for one
        return "is not a valid URL"


def is_loopback_host(host: str) -> bool:
    """`localhost`, an address in 127.0.0.0/8, or `::1`: a host that is the customer's own machine."""
    if host == LOOPBACK_NAME:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def redirect_url_problem(url: str) -> str | None:
    """What is wrong with `url` as a page to send a customer back to after checkout, or None.

    Accepted: an absolute `https` URL with a host, as RFC 3986 writes it (ASCII, nothing unencoded),
    with no user name or password. Plain `http` only to a loopback host (`localhost`, 127.0.0.0/8,
    `::1`), so a shop running on a developer's machine works; never to anything else.
    """
    parts = _parsed(url)
    if isinstance(parts, str):
        return parts
    if parts.scheme not in ("http", "https"):
        return "must be an https URL"
    problem = _host_problem(parts)
    if problem is not None:
        return problem
    if parts.scheme == "http" and not is_loopback_host(parts.hostname or ""):
        return "must be an https URL (http only for localhost, 127.0.0.0/8 or ::1)"
    return None


def website_url_problem(url: str) -> str | None:
    """What is wrong with `url` as a merchant's website, or None: an absolute `http` or `https` URL
    with a host, written as RFC 3986 requires, with no user name or password."""
    parts = _parsed(url)
    if isinstance(parts, str):
        return parts
    if parts.scheme not in ("http", "https"):
        return "must be an http or https URL"
    return _host_problem(parts)
