-- Checkout sessions: one payment attempt each. Amounts are integer minor units of `currency`.

CREATE TABLE checkout_sessions (
    id              uuid PRIMARY KEY,
    application_id  uuid NOT NULL REFERENCES applications (id),
    order_reference text NOT NULL,
    amount_minor    bigint NOT NULL CHECK (amount_minor > 0),
    currency        char(3) NOT NULL,
    status          text NOT NULL,
    failure_reason  text,
    provider_name   text,
    payment_method  text NOT NULL,
    expires_at      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX checkout_sessions_by_application
    ON checkout_sessions (application_id, created_at DESC, id DESC);
