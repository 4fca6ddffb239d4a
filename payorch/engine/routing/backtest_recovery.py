"""What a candidate document's recovery policy would have changed, as far as the history tells
(docs/routing.md, "Backtest", "Recovery in a backtest").

Pure code. A session's history says how its first attempt ended at its provider, and, when the
session had more than one attempt, how each did, with each recovered decline's reason and
provider's code (payorch keeps the code of a decline it followed with another attempt only). The
candidate's attempts (`recovery.planned_attempts` over its decision) can be followed in the history
only while they go where the history's went: so only a session the candidate sends first where
its first attempt went is counted, and from there attempt by attempt:

- the candidate's policy would follow a decline with another attempt (`recovery.retry_verdict`)
  at the provider the history's next attempt went to: the history knows how that one ended, and
  the walk goes on there;
- at another provider, or where the history tried none: the history cannot tell (`unknown`);
- a decline whose code the history did not keep (one no attempt followed) that the candidate's
  policy could follow: whether it would (a hard decline never is) and what it would get cannot be
  told (`declined_without_code`, or `unknown` once the candidate already retried);
- the candidate's policy would stop where the history went on (`no_longer_retried`, and
  `no_longer_recovered` when the history's later attempts were paid).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from payorch.engine.routing.recovery import RecoveryPolicy, RetryVerdict, retry_verdict
from payorch.storage.routing_history import PastAttempt, PastSession
from payorch.values.statuses import Outcome


@dataclass(frozen=True)
class RecoveryTally:
    """What the candidate's recovery would have changed: sessions whose first decline it follows
    with another attempt (`retried`), and of those the ones the history shows paid at one of its
    next attempts (`recovered`), shows declined at all of them (`not_recovered`), or cannot tell
    (`unknown`); sessions the history retried that it would not (`no_longer_retried`, of those
    paid after all: `no_longer_recovered`); declined first attempts whose code was not kept,
    which it may retry (`declined_without_code`)."""

    retried: int = 0
    recovered: int = 0
    not_recovered: int = 0
    unknown: int = 0
    no_longer_retried: int = 0
    no_longer_recovered: int = 0
    declined_without_code: int = 0


def _history(past: PastSession) -> tuple[PastAttempt, ...]:
    if past.attempts:
        return past.attempts
    outcome = past.outcome
    return (PastAttempt(past.provider, outcome is Outcome.SUCCESS, outcome is Outcome.FAILURE),)


class RecoveryCounter:
    """Counts `RecoveryTally`'s figures session by session (`count`)."""

    def __init__(self) -> None:
        self._counts = dict.fromkeys(RecoveryTally.__dataclass_fields__, 0)

    def count(self, past: PastSession, planned: Sequence[str], policy: RecoveryPolicy) -> None:
        """Count `past`, whose attempts by the candidate would go to `planned` in turn under `policy`
        (see the module's docstring)."""
        history = _history(past)
        if not planned or planned[0] != history[0].provider:
            return
        counts, retried = self._counts, False
        for number, attempt in enumerate(history, start=1):
            went_on = number < len(history)
            may_go_on = number < len(planned)  # the policy's attempts and the providers left
            if attempt.paid:
                counts["recovered"] += retried
                return
            if not attempt.declined and not went_on:  # open, abandoned or canceled: never retried
                counts["not_recovered"] += retried
                return
            if attempt.provider_code is None and not went_on:
                if may_go_on:
                    counts["unknown" if retried else "declined_without_code"] += 1
                else:
                    counts["not_recovered"] += retried
                return
            verdict = retry_verdict(
                policy, number, attempt.failure_reason, attempt.provider, attempt.provider_code
            )
            if verdict is not RetryVerdict.RETRY or not may_go_on:
                if retried:
                    counts["not_recovered"] += 1
                elif went_on:
                    counts["no_longer_retried"] += 1
                    counts["no_longer_recovered"] += any(later.paid for later in history[number:])
                return
            if not retried:
                counts["retried"] += 1
                retried = True
            if not went_on or history[number].provider != planned[number]:
                counts["unknown"] += 1
                return

    def result(self) -> RecoveryTally:
        return RecoveryTally(**self._counts)
