"""How the sandbox settles (`ReportsSettlements`, `providers.settlements`): from its own tables.

- Each paid checkout settles `settlement_lag_days` after the UTC day it was paid, each succeeded
  refund that long after the day it completed; nothing settles after today (the clock's UTC day).
- A payment's fee is `percent` of it (rounded half up) plus `fixed_minor`, per payment method
  (`[providers.sandbox.settlement_fees]`), never more than the payment; a refund's is 0.
- Payouts: one per account, settlement day and currency, arriving that day, carrying that day's
  items; its id says which (`po_sbx_<yyyymmdd>_<currency>_<account prefix>`).
- `payment_reference` is the checkout's id (`cs_sbx_...`, what payorch stores as the session's or
  attempt's provider reference), `refund_reference` the refund's (`re_sbx_...`).
- Test data that settles otherwise than it was paid (`simulator.TEST_CARDS`): settled 1% short
  (at least one minor unit), settled but never reported by an event, carried by a payout one minor
  unit short, reported paid but never settled.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal

import trio

from payorch.config import SandboxFee, SandboxFees
from payorch.providers.sandbox import simulator
from payorch.providers.settlements import Payout, SettledItem, SettledKind
from payorch.storage import sandbox_settlements as store
from payorch.storage.database import Database
from payorch.values.clock import Clock

_BATCH = 100
_SLICE = 50  # movements turned into items between two checkpoints
_Read = Callable[[datetime, datetime, tuple[datetime, str] | None], Awaitable[list[store.SandboxMovement]]]


@dataclass(frozen=True)
class SandboxSettlements:
    """The sandbox's settlement terms and the reader of what it settled for an account."""

    db: Database
    clock: Clock
    lag_days: int
    fees: SandboxFees

    def fee(self, method: str, gross_minor: int) -> int:
        """What the sandbox keeps of a payment of `gross_minor` by `method`."""
        terms = getattr(self.fees, method, None)
        if not isinstance(terms, SandboxFee):  # a method the fees do not name: no fee
            return 0
        percent = (Decimal(gross_minor) * terms.percent / 100).quantize(Decimal(1), ROUND_HALF_UP)
        return min(gross_minor, int(percent) + terms.fixed_minor)

    async def items(self, account: str, first: date, last: date) -> AsyncIterator[SettledItem]:
        """Every item of `account` settled on the days `first` to `last`, payments then refunds."""
        async for _, item in self._settled(account, first, last):
            yield item

    async def payouts(self, account: str, first: date, last: date) -> AsyncIterator[Payout]:
        """One payout per day and currency of the items settled on the days `first` to `last`."""
        window = self._window(first, last)
        if window is None:
            return
        # Summed in PostgreSQL, as `_item` settles each movement: not a second read of the period.
        fees = {
            method: (terms.percent, terms.fixed_minor)
            for method in SandboxFees.model_fields
            if isinstance(terms := getattr(self.fees, method), SandboxFee)
        }
        sums = await self.db.autocommit(
            store.payout_sums,
            account,
            *window,
            self.lag_days,
            fees,
            simulator.SETTLED_SHORT,
            simulator.PAYOUT_SHORT,
        )
        for payout in sums:
            yield Payout(
                payout_id=_payout_id(account, payout.settled_on, payout.currency),
                currency=payout.currency,
                amount_minor=payout.amount_minor,
                arrives_on=payout.settled_on,
                status="paid",
            )

    async def _settled(
        self, account: str, first: date, last: date
    ) -> AsyncIterator[tuple[store.SandboxMovement, SettledItem]]:
        window = self._window(first, last)
        if window is None:
            return
        since, until = window

        async def payments(
            since: datetime, until: datetime, after: tuple[datetime, str] | None
        ) -> list[store.SandboxMovement]:
            return await self.db.autocommit(store.paid_checkouts, account, since, until, after, _BATCH)

        async def refunds(
            since: datetime, until: datetime, after: tuple[datetime, str] | None
        ) -> list[store.SandboxMovement]:
            return await self.db.autocommit(store.succeeded_refunds, account, since, until, after, _BATCH)

        for read in (payments, refunds):
            read_so_far = 0
            async for movement in _movements(read, since, until):
                yield movement, self._item(account, movement)
                read_so_far += 1
                if read_so_far % _SLICE == 0:  # a reader summing a whole period lets others run
                    await trio.lowlevel.checkpoint()

    def _window(self, first: date, last: date) -> tuple[datetime, datetime] | None:
        """The times whose movements settle on the days `first` to `last` (none after today)."""
        last = min(last, self.clock.now().astimezone(UTC).date())
        if last < first:
            return None
        lag = timedelta(days=self.lag_days)
        since = datetime.combine(first - lag, time(), UTC)
        until = datetime.combine(last + timedelta(days=1) - lag, time(), UTC)
        return since, until

    def _item(self, account: str, movement: store.SandboxMovement) -> SettledItem:
        settled_on = movement.moved_at.astimezone(UTC).date() + timedelta(days=self.lag_days)
        if movement.refund_id is None:
            gross = movement.amount_minor
            if movement.settlement_quirk == simulator.SETTLED_SHORT:
                gross -= max(1, gross // 100)
            fee = self.fee(movement.payment_method, gross)
            kind, item_id = SettledKind.PAYMENT, movement.checkout_id
        else:
            gross, fee = -movement.amount_minor, 0
            kind, item_id = SettledKind.REFUND, movement.refund_id
        return SettledItem(
            item_id=item_id,
            kind=kind,
            currency=movement.currency,
            gross_minor=gross,
            fee_minor=fee,
            net_minor=gross - fee,
            settled_on=settled_on,
            payment_reference=movement.checkout_id,
            refund_reference=movement.refund_id,
            payout_id=_payout_id(account, settled_on, movement.currency),
            method=movement.payment_method,
            created_at=movement.moved_at,
        )


async def _movements(read: _Read, since: datetime, until: datetime) -> AsyncIterator[store.SandboxMovement]:
    after: tuple[datetime, str] | None = None
    while True:
        batch = await read(since, until, after)
        for movement in batch:
            yield movement
        if len(batch) < _BATCH:
            return
        last = batch[-1]
        after = (last.moved_at, last.refund_id or last.checkout_id)


def _payout_id(account: str, day: date, currency: str) -> str:
    return f"po_sbx_{day:%Y%m%d}_{currency}_{account[:12]}"
