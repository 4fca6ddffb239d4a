"""The HTML helpers' redirects: a Location header carries a URL and nothing else."""

from __future__ import annotations

import pytest

from payorch.values.html import see_other


def test_a_redirect_is_303_to_the_url_and_never_cached() -> None:
    response = see_other("/console/applications?page=2")
    assert (response.status_code, response.headers["Location"]) == (303, "/console/applications?page=2")
    assert response.headers["Cache-Control"] == "no-store"


@pytest.mark.parametrize("url", ["/a\r\nSet-Cookie: x=1", "/a\n", "/a\tb", "/a b", "/a\x00", "/é"])
def test_a_redirect_to_a_url_with_a_control_character_space_or_non_ascii_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="printable ASCII"):
        see_other(url)
