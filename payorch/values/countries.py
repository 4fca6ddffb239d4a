"""Countries: the ISO 3166-1 alpha-2 codes, from Babel's copy of the CLDR territory data rather than
a hand-typed table.

CLDR names a few two-letter territories that are not ISO 3166-1 countries: codes ISO reserves for
other uses (Ascension AC, Clipperton CP, Sark CQ, Diego Garcia DG, Ceuta and Melilla EA, the European Union
EU, the Canary Islands IC, Tristan da Cunha TA, the United Nations UN), CLDR's own groupings (the
eurozone EZ, outlying Oceania QO) and its pseudo-locales and unknown region (XA, XB, ZZ). Those are
left out. Kosovo's XK, a code ISO leaves to its users, is kept: the European Commission, payment
providers and card schemes write Kosovo so.
"""

from __future__ import annotations

import functools

from babel import Locale

_NOT_ISO_COUNTRIES = frozenset(
    {"AC", "CP", "CQ", "DG", "EA", "EU", "EZ", "IC", "QO", "TA", "UN", "XA", "XB", "ZZ"}
)


@functools.cache
def known_countries() -> frozenset[str]:
    """Every ISO 3166-1 alpha-2 country code (and XK, Kosovo)."""
    territories = (str(code) for code in Locale("en").territories)
    return frozenset(
        code
        for code in territories
        if len(code) == 2 and code.isalpha() and code.isupper() and code not in _NOT_ISO_COUNTRIES
    )


def is_country(code: str) -> bool:
    """Whether `code` is an ISO 3166-1 alpha-2 country code (or XK)."""
    return code in known_countries()
