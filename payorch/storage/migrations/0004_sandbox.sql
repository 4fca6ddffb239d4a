-- The sandbox provider's own side: what an external provider keeps in its database. Nothing here
-- references payorch's tables: the sandbox knows payorch only by the ids it is given to echo back.
-- A sandbox "account" is the SHA-256 hex of the sandbox API key.

-- Where an account's events are sent. One endpoint per (account, url): registering the same URL again
-- replaces its secret, so a re-linked application does not leave a twin endpoint signing with an old one.
CREATE TABLE sandbox_webhook_endpoints (
    id         text PRIMARY KEY,                -- we_sbx_...
    account    text NOT NULL,
    url        text NOT NULL,
    secret     bytea NOT NULL,                  -- Fernet token of the signing secret
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (account, url)
);

-- Hosted checkouts. Amounts are integer minor units of `currency`.
CREATE TABLE sandbox_checkouts (
    id                  text PRIMARY KEY,       -- cs_sbx_...
    account             text NOT NULL,
    idempotency_key     text NOT NULL,
    amount_minor        bigint NOT NULL CHECK (amount_minor > 0),
    currency            char(3) NOT NULL,
    payment_method      text NOT NULL,
    order_reference     text NOT NULL,
    customer_email      text NOT NULL,
    client_reference    text NOT NULL,          -- payorch's session id, echoed in every event
    application_id      uuid NOT NULL,          -- payorch's application, kept as metadata
    success_url         text,
    failure_url         text,
    expires_at          timestamptz NOT NULL,
    status              text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'paid')),
    paid_at             timestamptz,
    refund_failure_code text,                   -- set when the card paid with fails every refund
    created_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (account, idempotency_key)
);

-- Refunds of paid checkouts. The outcome is decided at submission and announced `completes_at`.
CREATE TABLE sandbox_refunds (
    id               text PRIMARY KEY,          -- re_sbx_...
    account          text NOT NULL,
    idempotency_key  text NOT NULL,
    checkout_id      text NOT NULL REFERENCES sandbox_checkouts (id),
    amount_minor     bigint NOT NULL CHECK (amount_minor > 0),
    currency         char(3) NOT NULL,
    client_reference text NOT NULL,             -- payorch's refund id, echoed in its event
    reason           text,
    outcome          text NOT NULL CHECK (outcome IN ('succeeded', 'failed')),
    failure_code     text,
    completes_at     timestamptz NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (account, idempotency_key)
);
CREATE INDEX sandbox_refunds_by_checkout ON sandbox_refunds (checkout_id);

-- Every event the sandbox emits, with the exact body every delivery of it sends.
CREATE TABLE sandbox_events (
    id          text PRIMARY KEY,               -- evt_sbx_...
    account     text NOT NULL,
    type        text NOT NULL,
    checkout_id text NOT NULL REFERENCES sandbox_checkouts (id),
    refund_id   text REFERENCES sandbox_refunds (id),
    body        text NOT NULL,                  -- JSON, signed as these exact bytes (UTF-8)
    created_at  timestamptz NOT NULL DEFAULT now(),
    deliver_at  timestamptz NOT NULL            -- not sent before this
);
CREATE INDEX sandbox_events_by_checkout ON sandbox_events (checkout_id, created_at);

-- One delivery per event and endpoint registered for its account when it was queued, retried on
-- its own: one endpoint failing does not resend the event to the others.
CREATE TABLE sandbox_deliveries (
    event_id     text NOT NULL REFERENCES sandbox_events (id),
    endpoint_id  text NOT NULL REFERENCES sandbox_webhook_endpoints (id),
    deliver_at   timestamptz NOT NULL,          -- the next attempt is due then (or a claim's lease ends)
    attempts     integer NOT NULL DEFAULT 0,
    delivered_at timestamptz,
    given_up_at  timestamptz,
    last_error   text,                          -- HTTP status or exception class of the last failure
    PRIMARY KEY (event_id, endpoint_id)
);
CREATE INDEX sandbox_deliveries_due
    ON sandbox_deliveries (deliver_at) WHERE delivered_at IS NULL AND given_up_at IS NULL;
