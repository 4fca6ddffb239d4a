-- Outgoing webhooks: merchants' endpoint configurations, and the deliveries of outbox events to them.

CREATE TABLE webhook_configs (
    id                         uuid PRIMARY KEY,
    application_id             uuid NOT NULL REFERENCES applications (id),
    url                        text NOT NULL,
    is_active                  boolean NOT NULL DEFAULT true,
    subscribed_events          text[] NOT NULL,
    secret                     bytea NOT NULL,         -- Fernet token of the signing secret
    key_fingerprint            text NOT NULL,
    previous_secret            bytea,                  -- still signs until previous_secret_expires_at
    previous_secret_expires_at timestamptz,
    last_test_at               timestamptz,
    last_test_status           text,
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz,            -- NULL until the first change
    deleted_at                 timestamptz
);
CREATE INDEX webhook_configs_by_application
    ON webhook_configs (application_id, created_at DESC, id DESC) WHERE deleted_at IS NULL;

ALTER TABLE outbox_events ADD COLUMN fanned_out_at timestamptz;
CREATE INDEX outbox_events_to_fan_out ON outbox_events (seq) WHERE fanned_out_at IS NULL;

-- One delivery per event and configuration; the same webhook-id on every attempt.
CREATE TABLE webhook_deliveries (
    id                 uuid PRIMARY KEY,
    config_id          uuid NOT NULL REFERENCES webhook_configs (id),
    application_id     uuid NOT NULL REFERENCES applications (id),
    event_seq          bigint NOT NULL REFERENCES outbox_events (seq),
    session_id         uuid,                          -- deliveries of one session go out in event order
    status             text NOT NULL,                 -- PENDING, DELIVERED, FAILED
    attempts           integer NOT NULL DEFAULT 0,
    next_attempt_at    timestamptz,
    last_attempt_at    timestamptz,
    last_status_code   integer,
    last_error         text,
    delivered_at       timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (config_id, event_seq)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'PENDING';
CREATE INDEX webhook_deliveries_by_session ON webhook_deliveries (config_id, session_id, event_seq);
CREATE INDEX webhook_deliveries_by_config ON webhook_deliveries (config_id, created_at DESC, id DESC);

CREATE TABLE webhook_attempts (
    id            bigserial PRIMARY KEY,
    delivery_id   uuid NOT NULL REFERENCES webhook_deliveries (id),
    attempted_at  timestamptz NOT NULL DEFAULT now(),
    status_code   integer,
    error         text,
    latency_ms    integer NOT NULL,
    response_body text
);
CREATE INDEX webhook_attempts_by_delivery ON webhook_attempts (delivery_id, id);
