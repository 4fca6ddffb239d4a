"""The observed fee in routing's terms: a mean rate over the window's matched payments, and the
document's fee before it (`engine.routing.observed_fees`)."""

from __future__ import annotations

from decimal import Decimal

from payorch.engine.routing.document import Fee, RoutingDocument
from payorch.engine.routing.observed_fees import ObservedFee, ObservedFees, fee_in_force
from payorch.values.money import Money

OBSERVED = ObservedFee("sandbox", "card", "PLN", payments=3, gross_minor=30_000, fee_minor=500)


def test_the_observed_fee_is_the_fees_over_the_gross_in_percent_to_four_decimals() -> None:
    assert OBSERVED.percent == Decimal("1.6667")
    assert OBSERVED.fee == Fee(percent=Decimal("1.6667"))


def test_fees_refunded_beyond_those_kept_observe_no_fee_rather_than_a_gain() -> None:
    refunded = ObservedFee("sandbox", "card", "PLN", payments=1, gross_minor=10_000, fee_minor=-20)
    assert refunded.percent == 0


def test_the_observed_fee_leaves_its_share_of_any_amount() -> None:
    assert OBSERVED.fee.share_left(Money(10_000, "PLN")) == 1 - 0.016667


def test_the_documents_fee_for_the_provider_is_used_whenever_it_gives_one() -> None:
    document = RoutingDocument(fees={"sandbox": Fee(percent=Decimal("3"))})
    used = fee_in_force(document, ObservedFees([OBSERVED]), "sandbox", "card", "PLN")
    assert used is not None
    assert (used.fee.percent, used.source) == (Decimal("3"), "document")


def test_the_observed_fee_is_used_for_its_method_and_currency_only() -> None:
    observed = ObservedFees([OBSERVED])
    used = fee_in_force(RoutingDocument(), observed, "sandbox", "card", "PLN")
    assert used is not None
    assert (used.fee, used.source) == (OBSERVED.fee, "observed")
    assert fee_in_force(RoutingDocument(), observed, "sandbox", "blik", "PLN") is None
    assert fee_in_force(RoutingDocument(), observed, "sandbox", "card", "EUR") is None
    assert fee_in_force(RoutingDocument(), observed, "stripe", "card", "PLN") is None
