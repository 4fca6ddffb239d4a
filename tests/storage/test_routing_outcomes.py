"""Routing outcomes: an attempt's outcome is the highest verdict it was given (paid, declined, no
verdict), in whatever order they are recorded; each attempt of a session has its own; and each
segment's outcomes are read by their sessions' creation, newest first, at most a window of them,
for one application only."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta

from payorch.storage.database import Connection, Database
from payorch.storage.routing_outcomes import AttemptOutcome, SegmentOutcomes, record_outcome, segment_outcomes
from payorch.values.statuses import Outcome

NOW = datetime(2025, 1, 1, tzinfo=UTC)


async def _application(conn: Connection) -> uuid.UUID:
    merchant, application = uuid.uuid4(), uuid.uuid4()
    await conn.execute(
        """INSERT INTO merchants (id, legal_business_name, company_registration_number, organization)
           VALUES ($1, 'Shop', $2, '{}')""",
        merchant,
        str(merchant),
    )
    await conn.execute(
        "INSERT INTO applications (id, merchant_id, name) VALUES ($1, $2, 'App')", application, merchant
    )
    return application


async def _session(
    conn: Connection, application: uuid.UUID, currency: str = "PLN", created_at: datetime = NOW
) -> uuid.UUID:
    session = uuid.uuid4()
    await conn.execute(
        """INSERT INTO checkout_sessions (id, application_id, order_reference, amount_minor, currency,
                                         status, payment_method, customer, created_at)
           VALUES ($1, $2, 'order', 100, $3, 'PENDING', 'card', '{}', $4)""",
        session,
        application,
        currency,
        created_at,
    )
    return session


async def _record(
    conn: Connection,
    application: uuid.UUID,
    outcome: Outcome,
    provider: str = "sandbox",
    currency: str = "PLN",
    session: uuid.UUID | None = None,
    attempt: int | None = None,
) -> AttemptOutcome:
    return await record_outcome(
        conn,
        application_id=application,
        session_id=session or await _session(conn, application, currency),
        provider=provider,
        payment_method="card",
        currency=currency,
        outcome=outcome,
        now=NOW,
        attempt_number=attempt,
    )


async def test_a_payment_after_an_abandonment_makes_the_attempt_a_success(db: Database) -> None:
    async def record(conn: Connection) -> tuple[AttemptOutcome, AttemptOutcome, list[SegmentOutcomes]]:
        application = await _application(conn)
        session = await _session(conn, application)
        first = await _record(conn, application, Outcome.ABANDONMENT, session=session)
        again = await _record(conn, application, Outcome.SUCCESS, session=session)
        return first, again, await segment_outcomes(conn, application, 200)

    first, again, rows = await db.transaction(record)
    assert first == (1, Outcome.ABANDONMENT, True)
    assert again == (1, Outcome.SUCCESS, True)
    assert rows == [SegmentOutcomes("sandbox", "card", "PLN", "s")]


# Every order of these verdicts of one attempt, each verdict possibly twice (a provider's event
# delivered again): the stored outcome is the same, the highest of them.
_VERDICT_SETS = {
    "sfa": Outcome.SUCCESS,
    "sf": Outcome.SUCCESS,
    "sa": Outcome.SUCCESS,
    "fa": Outcome.FAILURE,
    "ffa": Outcome.FAILURE,
    "aa": Outcome.ABANDONMENT,
    "ssf": Outcome.SUCCESS,
}


async def test_an_attempts_outcome_is_the_same_whatever_order_its_verdicts_arrive_in(db: Database) -> None:
    async def record(conn: Connection) -> dict[tuple[str, ...], str]:
        application = await _application(conn)
        stored = {}
        for verdicts in _VERDICT_SETS:
            for order in set(itertools.permutations(verdicts)):
                session = await _session(conn, application)
                for verdict in order:
                    answer = await _record(conn, application, Outcome(verdict), session=session)
                stored[order] = answer.outcome.value
                found = await conn.fetchval(
                    "SELECT outcome FROM routing_outcomes WHERE session_id = $1", session
                )
                assert found == answer.outcome
        return stored

    stored = await db.transaction(record)
    assert len(stored) == 19  # 6 + 2 + 2 + 2 + 3 + 1 + 3 orders
    for order, outcome in stored.items():
        assert outcome == _VERDICT_SETS["".join(sorted(order, key="sfa".index))], order


async def test_a_segment_is_read_in_the_order_its_sessions_were_created_not_its_outcomes(
    db: Database,
) -> None:
    async def record(conn: Connection) -> list[SegmentOutcomes]:
        application = await _application(conn)
        # Created oldest first: a checkout left unpaid, then two paid. The abandonment is recorded
        # last (at expiry), after the payments of the sessions created after it.
        left, paid, paid_too = [
            await _session(conn, application, created_at=NOW + timedelta(seconds=n)) for n in range(3)
        ]
        for session in (paid_too, paid):
            await _record(conn, application, Outcome.SUCCESS, session=session)
        await _record(conn, application, Outcome.ABANDONMENT, session=left)
        return await segment_outcomes(conn, application, 2)

    assert await db.transaction(record) == [SegmentOutcomes("sandbox", "card", "PLN", "ss")]


async def test_a_decline_then_a_payment_of_one_attempt_is_one_success(db: Database) -> None:
    async def record(conn: Connection) -> tuple[list[AttemptOutcome], list[SegmentOutcomes]]:
        application = await _application(conn)
        session = await _session(conn, application)
        answers = [
            await _record(conn, application, outcome, session=session)
            for outcome in (
                Outcome.FAILURE,
                Outcome.FAILURE,
                Outcome.SUCCESS,
                Outcome.SUCCESS,
                Outcome.FAILURE,
            )
        ]
        return answers, await segment_outcomes(conn, application, 200)

    answers, rows = await db.transaction(record)
    assert [(answer.outcome, answer.written) for answer in answers] == [
        (Outcome.FAILURE, True),
        (Outcome.FAILURE, False),
        (Outcome.SUCCESS, True),
        (Outcome.SUCCESS, False),
        (Outcome.SUCCESS, False),
    ]
    assert rows == [SegmentOutcomes("sandbox", "card", "PLN", "s")]


async def test_each_attempt_of_a_session_has_its_own_outcome_at_its_provider(db: Database) -> None:
    async def record(conn: Connection) -> tuple[AttemptOutcome, AttemptOutcome, list[SegmentOutcomes]]:
        application = await _application(conn)
        session = await _session(conn, application)
        first = await _record(conn, application, Outcome.FAILURE, session=session, attempt=1)
        second = await _record(
            conn, application, Outcome.SUCCESS, provider="stripe", session=session, attempt=2
        )
        return first, second, await segment_outcomes(conn, application, 200)

    first, second, rows = await db.transaction(record)
    assert (first, second) == ((1, Outcome.FAILURE, True), (2, Outcome.SUCCESS, True))
    assert rows == [
        SegmentOutcomes("sandbox", "card", "PLN", "f"),
        SegmentOutcomes("stripe", "card", "PLN", "s"),
    ]


async def test_each_segment_reads_its_newest_outcomes_first_at_most_a_window(db: Database) -> None:
    async def record(conn: Connection) -> tuple[list[SegmentOutcomes], list[SegmentOutcomes]]:
        application, other = await _application(conn), await _application(conn)
        for outcome in "ffsssa":  # oldest first
            await _record(conn, application, Outcome(outcome))
        for outcome in "sf":
            await _record(conn, application, Outcome(outcome), provider="stripe")
            await _record(conn, application, Outcome(outcome), currency="EUR")
        await _record(conn, other, Outcome.FAILURE)
        return await segment_outcomes(conn, application, 4), await segment_outcomes(conn, other, 4)

    mine, others = await db.transaction(record)
    assert mine == [
        SegmentOutcomes("sandbox", "card", "EUR", "fs"),
        SegmentOutcomes("sandbox", "card", "PLN", "asss"),
        SegmentOutcomes("stripe", "card", "PLN", "fs"),
    ]
    assert others == [SegmentOutcomes("sandbox", "card", "PLN", "f")]


async def test_an_application_without_outcomes_has_no_segments(db: Database) -> None:
    async def read(conn: Connection) -> list[SegmentOutcomes]:
        return await segment_outcomes(conn, await _application(conn), 200)

    assert await db.transaction(read) == []
