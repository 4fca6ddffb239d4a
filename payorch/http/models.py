"""Request bodies and query strings, as pydantic models: the single source of their shapes.

Bodies are strict (no `"true"` for `true`, no `"5"` for `5`) and refuse unknown fields, so a typo
in an integration is a 400 rather than a silently ignored value.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    EmailStr,
    Field,
    StringConstraints,
)

from payorch.engine.pagination import DEFAULT_LIMIT, DEFAULT_PAGE, MAX_LIMIT
from payorch.engine.passwords import PASSWORD_MAX_LENGTH, PASSWORD_MIN_LENGTH

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=255)]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]


def _web_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http or https URL")
    return value


WebUrl = Annotated[Text, AfterValidator(_web_url)]


class Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class Query(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RegisteredAddress(Body):
    line1: Text
    line2: Annotated[str, StringConstraints(strip_whitespace=True, max_length=255)] | None = None
    city: Text
    state: Text
    postalCode: Text
    country: Text


class Organization(Body):
    legalBusinessName: Text
    companyRegistrationNumber: Name
    registeredAddress: RegisteredAddress
    companyWebsite: WebUrl
    industry: Text
    sector: Text
    contactPersonFirstName: Text
    contactPersonLastName: Text
    contactPersonEmail: EmailStr


class Admin(Body):
    email: EmailStr
    password: Annotated[str, Field(min_length=PASSWORD_MIN_LENGTH, max_length=PASSWORD_MAX_LENGTH)]
    firstName: Text
    lastName: Text


class SignupRequest(Body):
    organization: Organization
    admin: Admin


class SignupQuery(Query):
    token: str = ""


class LoginRequest(Body):
    email: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=320)]
    password: Annotated[str, StringConstraints(min_length=1, max_length=256)]


class ApplicationCreateRequest(Body):
    name: Name
    description: dict[str, Any] | None = None


class ApplicationStatusRequest(Body):
    isEnabled: bool


class ApiKeyCreateRequest(Body):
    description: Annotated[str, StringConstraints(strip_whitespace=True, max_length=255)] = ""


def _whole_number_text(value: object) -> object:
    if isinstance(value, str) and not re.fullmatch(r"[0-9]{1,20}", value):
        raise ValueError("must be a whole number written with digits only")
    return value


QueryInt = Annotated[int, BeforeValidator(_whole_number_text)]


class PageQuery(Query):
    page: Annotated[QueryInt, Field(ge=1)] = DEFAULT_PAGE
    limit: Annotated[QueryInt, Field(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT


class ApplicationListQuery(PageQuery):
    include: Literal["apiKeys"] | None = None
