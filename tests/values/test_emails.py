"""E-mail addresses in request bodies are accepted, refused and normalised exactly as pydantic's
`EmailStr` does (`payorch.values.emails`), whichever way an address is checked."""

from __future__ import annotations

import random

import pytest
from pydantic import BaseModel, EmailStr, ValidationError

from payorch.values.emails import Email, normalized_email

ADDRESSES = [
    "buyer@example.com",
    "Buyer.Name+tag@Example.COM",
    "POSTMASTER@example.com",
    "Info@shop.example.org",
    "a@b.co",
    "a@b.c",
    "a@b.c1",
    "a@b.1c",
    "a@1.2.3.4",
    "a@b",
    "a@localhost",
    "a@shop.local",
    "a@shop.test",
    "a@example.invalid",
    "a@x.onion",
    "a@x.arpa",
    "a@-x.com",
    "a@x-.com",
    "a@ab--cd.com",
    "a@xn--bcher-kva.com",
    "a@xn--zz.com",
    "a@b..com",
    "a@.b.com",
    "a@b.com.",
    ".a@b.com",
    "a.@b.com",
    "a..b@b.com",
    "a b@b.com",
    " a@b.com ",
    "a@b.com\n",
    "<a@b.com>",
    "Jan Kowalski <jan@example.com>",
    '"quoted"@example.com',
    "üser@example.com",
    "user@bücher.de",
    "user@BÜCHER.de",
    "user@ex_ample.com",
    "user@[192.0.2.1]",
    "@example.com",
    "user@",
    "user",
    "",
    "user@@example.com",
    "!#$%&'*+/=?^_`{|}~-@example.com",
    "x" * 64 + "@example.com",
    "x" * 65 + "@example.com",
    "x" * 100 + "@example.com",
    "a@" + "b" * 63 + ".com",
    "a@" + "b" * 64 + ".com",
    "a@" + ".".join(["c" * 63] * 3) + "." + "d" * 60,
    "a@" + ".".join(["c" * 63] * 4) + ".com",
    "a@" + "e" * 10 + "." + "f" * 63,
    "a@example." + "g" * 64,
    "a@EXAMPLE.Com",
    "a@example.c-m",
    "a@example.-com",
]

# Characters that make an address plain, nearly plain or not plain at all.
ALPHABET = "abcXYZ09.-_+@!'~ ü\"<>[]\t" + "@@.."


def _as_email_str(value: str) -> str | None:
    """What pydantic's `EmailStr` makes of `value`: the address it normalises to, None if refused."""
    try:
        return _EmailStrBody(email=value).email
    except ValidationError:
        return None


def _as_email(value: str) -> str | None:
    try:
        return _EmailBody(email=value).email
    except ValidationError:
        return None


class _EmailStrBody(BaseModel):
    email: EmailStr


class _EmailBody(BaseModel):
    email: Email


def _random_addresses(count: int) -> list[str]:
    draw = random.Random(20261129)
    found = []
    for _ in range(count):
        local = "".join(draw.choice(ALPHABET) for _ in range(draw.randint(0, 8)))
        domain = "".join(draw.choice(ALPHABET) for _ in range(draw.randint(0, 12)))
        found.append(f"{local}@{domain}")
        found.append(f"{local}@{domain.replace('@', '')}.{draw.choice(['com', 'Pl', 'c0m', 'x', 'local'])}")
        found.append(_nearly_plain(draw))
    return found


def _nearly_plain(draw: random.Random) -> str:
    """An address of atoms and host-name labels, most of them valid, some a character or a length
    away from it."""
    atoms = [
        "".join(
            draw.choice("abcXYZ019+_'=-~" + "." * (draw.random() < 0.05)) for _ in range(draw.randint(1, 9))
        )
        for _ in range(draw.randint(1, 3))
    ]
    labels = [
        "".join(draw.choice("abcXYZ019-" + "_ü" * (draw.random() < 0.05)) for _ in range(draw.randint(1, 6)))
        for _ in range(draw.randint(0, 3))
    ]
    top = draw.choice(
        ["com", "PL", "c0m", "x", "9", "local", "test", "invalid", "xn--p1ai", "co-uk", "a" * 64]
    )
    local = ".".join(atoms) * draw.choice([1, 1, 1, 8])
    return f"{local}@{'.'.join([*labels, top])}"


@pytest.mark.parametrize("address", ADDRESSES)
def test_an_address_is_accepted_refused_and_normalised_as_email_str_does(address: str) -> None:
    assert _as_email(address) == _as_email_str(address)


def test_thousands_of_drawn_addresses_are_judged_as_email_str_judges_them() -> None:
    addresses = _random_addresses(5000)
    assert [_as_email(address) for address in addresses] == [_as_email_str(address) for address in addresses]
    assert any(_as_email_str(address) is not None for address in addresses)


def test_a_refused_address_carries_email_str_s_own_error() -> None:
    for address in ("a@localhost", "a..b@example.com", "a@example.invalid", "nobody"):
        with pytest.raises(ValidationError) as ours:
            _EmailBody(email=address)
        with pytest.raises(ValidationError) as theirs:
            _EmailStrBody(email=address)
        assert ours.value.errors() == theirs.value.errors()


def test_a_plain_address_keeps_its_local_part_and_lowers_its_domain() -> None:
    assert normalized_email("Jan.Kowalski+1@Shop.Example.COM") == "Jan.Kowalski+1@shop.example.com"
    assert normalized_email("Abuse@example.com") == "abuse@example.com"


def test_the_json_schema_of_an_address_field_is_email_str_s() -> None:
    assert _EmailBody.model_json_schema()["properties"] == _EmailStrBody.model_json_schema()["properties"]
