"""Driving the console as a browser would: read a page, find its form's CSRF token, post the form."""

from __future__ import annotations

import re
from typing import Any

from tests.helpers import PASSWORD, Client

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found, html
    return found.group(1)


async def page(client: Client, path: str) -> tuple[Any, str]:
    response = await client.get(path)
    return response, await response.get_data(as_text=True)


async def sign_in(client: Client, email: str, password: str = PASSWORD, **kwargs: Any) -> Any:
    """Open the sign-in page and submit it (the answer: 303 to the applications when signed in)."""
    _, html = await page(client, "/console/sign-in")
    return await client.post(
        "/console/sign-in",
        form={"csrf_token": csrf_of(html), "email": email, "password": password},
        **kwargs,
    )


async def signed_in(client: Client, email: str) -> str:
    """Sign in; the CSRF token of the session's forms."""
    response = await sign_in(client, email)
    assert response.status_code == 303, await response.get_data(as_text=True)
    assert response.headers["Location"] == "/console/applications"
    _, html = await page(client, "/console/applications")
    return csrf_of(html)


def session_cookie(response: Any) -> str | None:
    """The `Set-Cookie` header of the session cookie on `response`, if any."""
    for header in response.headers.getlist("Set-Cookie"):
        if header.startswith("payorch_console="):
            return str(header)
    return None
