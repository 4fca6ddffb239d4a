-- Checkout sessions: one payment attempt each. Amounts are integer minor units of `currency`.

CREATE TABLE checkout_sessions (
    id                     uuid PRIMARY KEY,
    application_id         uuid NOT NULL REFERENCES applications (id),
    order_reference        text NOT NULL,
    amount_minor           bigint NOT NULL CHECK (amount_minor > 0),   -- amount.total
    shipping_minor         bigint NOT NULL DEFAULT 0 CHECK (shipping_minor >= 0),
    tax_minor              bigint NOT NULL DEFAULT 0 CHECK (tax_minor >= 0),
    currency               char(3) NOT NULL,
    status                 text NOT NULL,
    failure_reason         text,
    provider_name          text,
    provider_reference     text,            -- the provider's id of its checkout
    payment_method         text NOT NULL,
    checkout_url           text,
    routing_score          numeric(5, 4),
    locale                 text,
    customer               jsonb NOT NULL,
    order_items            jsonb,
    shipping               jsonb,
    additional_information jsonb,
    redirect_urls          jsonb,
    expires_at             timestamptz,
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX checkout_sessions_by_application
    ON checkout_sessions (application_id, created_at DESC, id DESC);
CREATE INDEX checkout_sessions_pending_expiry
    ON checkout_sessions (expires_at) WHERE status = 'PENDING';
CREATE UNIQUE INDEX checkout_sessions_by_provider_reference
    ON checkout_sessions (provider_name, provider_reference);
