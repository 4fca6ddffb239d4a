-- What learned routing learns from (docs/routing.md, "What routing learns"): each session's first
-- outcome at the provider that created its checkout, written in the transaction that applies it
-- (`engine.payments.events`); `session_id` unique, so a later event adds nothing. `outcome` is one
-- of `values.statuses.Outcome`: its CHECK constraint is written by migration 0014.
--
-- The rates read each segment's (provider, payment method, currency) newest outcomes: the index
-- holds them in that order, `outcome` included, so a segment's window is one backward index-only
-- range scan, however many older outcomes the segment has (`storage.routing_outcomes`).

CREATE TABLE routing_outcomes (
    seq            bigserial PRIMARY KEY,
    application_id uuid NOT NULL REFERENCES applications (id),
    provider_name  text NOT NULL,
    payment_method text NOT NULL,
    currency       char(3) NOT NULL,
    outcome        text NOT NULL,
    session_id     uuid NOT NULL UNIQUE REFERENCES checkout_sessions (id),
    recorded_at    timestamptz NOT NULL
);
CREATE INDEX routing_outcomes_by_segment
    ON routing_outcomes (application_id, provider_name, payment_method, currency, seq) INCLUDE (outcome);
