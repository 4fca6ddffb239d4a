-- Provider configurations, idempotency keys and the transactional outbox of events.

CREATE TABLE provider_configs (
    application_id    uuid NOT NULL REFERENCES applications (id),
    provider          text NOT NULL,
    is_active         boolean NOT NULL DEFAULT true,
    payment_methods   text[] NOT NULL,
    credentials       bytea NOT NULL,       -- Fernet token of the provider API key
    key_fingerprint   text NOT NULL,        -- first 8 + "..." + last 4 characters of the API key
    webhook_reference text,                 -- the provider's id of the endpoint registered with it
    webhook_secret    bytea,                -- Fernet token of the secret the provider signs events with
    busy_until        timestamptz,          -- a link or key change is talking to the provider until then
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (application_id, provider)
);

-- An Idempotency-Key is claimed by inserting its row before any work (a second process sees it
-- in progress); the first answer is stored with it and replayed until expires_at.
CREATE TABLE idempotency_keys (
    application_id  uuid NOT NULL REFERENCES applications (id),
    scope           text NOT NULL,          -- the endpoint, with the ids in its path
    key             text NOT NULL,
    fingerprint     bytea NOT NULL,         -- SHA-256 of the canonical request
    resource_id     uuid NOT NULL,          -- the session or refund this key creates
    response_status integer,                -- NULL while the first request is in progress
    response_body   jsonb,
    locked_until    timestamptz NOT NULL,   -- an in-progress claim older than this was abandoned
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL,
    PRIMARY KEY (application_id, scope, key)
);
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);

-- Events written in the same transaction as the state change that emits them.
CREATE TABLE outbox_events (
    seq            bigserial PRIMARY KEY,   -- commit order within one session is seq order
    id             text NOT NULL UNIQUE,    -- evt_...: the event id merchants see
    application_id uuid NOT NULL REFERENCES applications (id),
    session_id     uuid REFERENCES checkout_sessions (id),
    type           text NOT NULL,
    payload        jsonb NOT NULL,          -- the delivery body
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_events_by_session ON outbox_events (session_id, seq);

-- Provider events already applied: a provider may deliver one event several times. Keyed by
-- application too: a provider account linked to two applications sends each of them every event.
CREATE TABLE provider_events_seen (
    provider       text NOT NULL,
    application_id uuid NOT NULL REFERENCES applications (id),
    event_id       text NOT NULL,
    received_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, application_id, event_id)
);
