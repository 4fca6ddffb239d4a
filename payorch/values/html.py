"""Plain HTML pages for customers' browsers (the sandbox's checkout, payorch's payment result):
inline style only, no script, no outside asset, never cached, a policy that lets nothing else in,
and never inside another site's frame (a page that takes payment framed by another site could be
overlaid to trick the customer into paying: clickjacking)."""

from __future__ import annotations

from html import escape

from quart import Response

from payorch.values.money import to_major_units

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 40rem; margin: 2rem auto; padding: 0 1rem; }
.badge { background: #ffe08a; padding: .1rem .5rem; border-radius: .3rem; font-size: .85rem; }
dl { display: grid; grid-template-columns: max-content auto; gap: .3rem 1rem; }
dt { font-weight: 600; } dd { margin: 0; }
form { margin: 1.5rem 0; } label { display: block; margin-bottom: .3rem; }
input { font-size: 1.1rem; padding: .4rem; width: 16rem; } button { font-size: 1.1rem; padding: .4rem 1rem; }
table { border-collapse: collapse; margin-top: .5rem; }
td, th { border: 1px solid #ccc; padding: .3rem .6rem; }
.error { color: #a00; } code { font-size: 1rem; }
"""


def html_page(
    title: str, content: str, status: int, *, badge: str | None = None, refresh_s: int | None = None
) -> Response:
    """A page with `content` (HTML, already escaped) under an `<h1>` of `title`; `refresh_s` has the
    browser load it again after that many seconds."""
    refresh = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s else ""
    marker = f'<p><span class="badge">{escape(badge)}</span></p>' if badge else ""
    page = (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">{refresh}'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
        f"<body>{marker}<h1>{escape(title)}</h1>{content}</body></html>\n"
    )
    response = Response(page, status=status, content_type="text/html; charset=utf-8")
    response.headers["Cache-Control"] = "no-store"
    response.headers["Content-Security-Policy"] = (
        "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"
    )
    response.headers["X-Frame-Options"] = "DENY"  # for browsers that predate frame-ancestors
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


def see_other(url: str) -> Response:
    """303: the browser follows with a GET, so reloading the page there does not post again.
    `url` is payorch's own or checked by the caller; a control character or space in it is a bug
    (`ValueError`), never written into the header."""
    if not all("!" <= character <= "~" for character in url):
        raise ValueError("a redirect's URL must be printable ASCII without spaces")
    response = Response("", status=303)
    response.headers["Location"] = url
    response.headers["Cache-Control"] = "no-store"
    return response


def formatted_amount(minor: int, currency: str) -> str:
    """`123456` PLN as `1,234.56 PLN`."""
    return f"{to_major_units(minor, currency):,} {currency}"
