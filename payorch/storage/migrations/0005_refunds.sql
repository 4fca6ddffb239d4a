-- Refunds of paid checkout sessions. A refund that is not FAILED holds its amount against the
-- session's refundable balance from the moment it is created.

CREATE TABLE refunds (
    id                 uuid PRIMARY KEY,
    session_id         uuid NOT NULL REFERENCES checkout_sessions (id),
    application_id     uuid NOT NULL REFERENCES applications (id),
    amount_minor       bigint NOT NULL CHECK (amount_minor > 0),
    currency           char(3) NOT NULL,
    status             text NOT NULL,                -- PENDING, COMPLETED, FAILED
    failure_reason     text,
    reason             text,
    line_items         jsonb,
    provider_name      text NOT NULL,
    provider_reference text,                         -- set once the provider acknowledged it
    submit_attempts    integer NOT NULL DEFAULT 0,
    next_submit_at     timestamptz,                  -- when the supervisor submits it (not acknowledged yet)
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX refunds_by_session ON refunds (session_id, created_at, id);
CREATE INDEX refunds_to_submit ON refunds (next_submit_at)
    WHERE provider_reference IS NULL AND status = 'PENDING';

ALTER TABLE outbox_events ADD COLUMN refund_id uuid REFERENCES refunds (id);
