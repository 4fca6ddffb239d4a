"""Page arithmetic of the pagination envelope (section 2.2)."""

from __future__ import annotations

from payorch.values.pagination import DEFAULT_LIMIT, DEFAULT_PAGE, MAX_OFFSET, PageRequest, envelope


def test_page_request_defaults_to_page_1_of_20() -> None:
    assert (PageRequest().page, PageRequest().limit) == (DEFAULT_PAGE, DEFAULT_LIMIT) == (1, 20)


def test_first_page_starts_at_offset_0() -> None:
    assert PageRequest(page=1, limit=20).offset == 0


def test_offset_skips_the_earlier_pages() -> None:
    assert PageRequest(page=3, limit=20).offset == 40


def test_offset_of_a_huge_page_fits_a_bigint() -> None:
    assert PageRequest(page=10**20, limit=100).offset == MAX_OFFSET == 2**63 - 1


def test_envelope_has_exactly_the_fields_of_section_2_2() -> None:
    assert set(envelope([], PageRequest(), 0)) == {
        "items",
        "page",
        "limit",
        "totalItems",
        "totalPages",
        "hasPreviousPage",
        "hasNextPage",
    }


def test_envelope_passes_the_items_through() -> None:
    items = [{"id": "b"}, {"id": "a"}]
    assert envelope(items, PageRequest(), 2)["items"] == items


def test_no_items_means_no_pages() -> None:
    body = envelope([], PageRequest(page=1, limit=20), 0)
    assert (body["totalItems"], body["totalPages"]) == (0, 0)
    assert (body["hasPreviousPage"], body["hasNextPage"]) == (False, False)


def test_partial_page_counts_as_a_page() -> None:
    assert envelope([1], PageRequest(page=1, limit=20), 1)["totalPages"] == 1


def test_exact_multiple_has_no_extra_page() -> None:
    assert envelope([1, 2], PageRequest(page=1, limit=2), 4)["totalPages"] == 2


def test_remainder_makes_one_more_page() -> None:
    assert envelope([1, 2], PageRequest(page=1, limit=2), 5)["totalPages"] == 3


def test_first_page_has_only_a_next_page() -> None:
    body = envelope([1, 2], PageRequest(page=1, limit=2), 5)
    assert (body["hasPreviousPage"], body["hasNextPage"]) == (False, True)


def test_middle_page_has_both_neighbours() -> None:
    body = envelope([3, 4], PageRequest(page=2, limit=2), 5)
    assert (body["hasPreviousPage"], body["hasNextPage"]) == (True, True)


def test_last_page_has_only_a_previous_page() -> None:
    body = envelope([5], PageRequest(page=3, limit=2), 5)
    assert (body["hasPreviousPage"], body["hasNextPage"]) == (True, False)


def test_only_page_has_no_neighbours() -> None:
    body = envelope([1, 2, 3], PageRequest(page=1, limit=20), 3)
    assert (body["hasPreviousPage"], body["hasNextPage"]) == (False, False)


def test_page_past_the_end_has_a_previous_page_and_no_next() -> None:
    body = envelope([], PageRequest(page=5, limit=2), 5)
    assert (body["page"], body["totalPages"]) == (5, 3)
    assert (body["hasPreviousPage"], body["hasNextPage"]) == (True, False)


def test_envelope_echoes_page_and_limit() -> None:
    body = envelope([], PageRequest(page=7, limit=13), 0)
    assert (body["page"], body["limit"]) == (7, 13)
