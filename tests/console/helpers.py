"""Driving the console as a browser would: read a page, find its form's CSRF token, post the form."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from payorch.http.services import PayorchApp
from tests.helpers import PASSWORD, Client

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found, html
    return found.group(1)


async def page(client: Client, path: str) -> tuple[Any, str]:
    response = await client.get(path)
    return response, await response.get_data(as_text=True)


async def submit(client: Client, path: str, fields: Mapping[str, str | Sequence[str]]) -> tuple[Any, str]:
    """POST a form as a browser does, a list (the ticked boxes of a group) one field per value: the
    answer, and its page."""
    response = await client.post(
        path,
        data=urlencode(fields, doseq=True),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
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


async def signed_in_browser(app: PayorchApp, email: str) -> tuple[Client, str]:
    """A new browser signed in as `email`, and the CSRF token of its session's forms."""
    browser = app.test_client()
    return browser, await signed_in(browser, email)


def session_cookie(response: Any) -> str | None:
    """The `Set-Cookie` header of the session cookie on `response`, if any."""
    for header in response.headers.getlist("Set-Cookie"):
        if header.startswith("payorch_console="):
            return str(header)
    return None
