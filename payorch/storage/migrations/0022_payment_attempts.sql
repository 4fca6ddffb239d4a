-- A session's payment attempts that have ended (docs/api.md, "Attempts"). The attempt now open is
-- the session's own row (its provider, checkout reference, checkout URL and routing columns), so a
-- create writes nothing here; when an attempt ends and the next opens (`storage.next_attempt`), the
-- ended one is written here and the session's row takes the next, in one transaction under the
-- session's row lock. `number` counts a session's attempts from 1; the open attempt's is one more
-- than its last ended one's. `status`, `failure_reason` and `routing_reason` are one of
-- `values.statuses`' `AttemptStatus`, `FailureReason` and `RoutingReason`: their CHECK constraints
-- are written by migration 0014. `provider_code` is the provider's own decline code, as the
-- routing document's `neverRetry` takes it. `routing_reason` is NULL for an attempt of a session
-- created before payorch kept it (migration 0016).
--
-- The unique index on (session_id, number) is also the one a session read uses for its attempts,
-- in order.

CREATE TABLE payment_attempts (
    id                 uuid PRIMARY KEY,
    session_id         uuid NOT NULL REFERENCES checkout_sessions (id),
    application_id     uuid NOT NULL REFERENCES applications (id),
    number             integer NOT NULL CHECK (number >= 1),
    provider_name      text NOT NULL,
    provider_reference text NOT NULL,
    status             text NOT NULL,
    failure_reason     text,
    provider_code      text CHECK (length(provider_code) BETWEEN 1 AND 64),
    routing_reason     text,
    created_at         timestamptz NOT NULL,
    ended_at           timestamptz NOT NULL CHECK (ended_at >= created_at)
);
CREATE UNIQUE INDEX payment_attempts_by_session ON payment_attempts (session_id, number);
