-- Merchant accounts: invites, merchants, their admin users, applications and API keys.

CREATE TABLE invites (
    id          uuid PRIMARY KEY,
    token_hash  bytea NOT NULL UNIQUE,          -- SHA-256 of the invite token; the token itself is never stored
    email       text NOT NULL,                  -- where the signup link was sent
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz,
    merchant_id uuid                            -- the merchant the invite created
);

CREATE TABLE merchants (
    id                          uuid PRIMARY KEY,
    legal_business_name         text NOT NULL,
    company_registration_number text NOT NULL,
    organization                jsonb NOT NULL, -- the organization object as the merchant gave it
    created_at                  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX merchants_registration_number_key
    ON merchants (lower(company_registration_number));

CREATE TABLE users (
    id            uuid PRIMARY KEY,
    merchant_id   uuid NOT NULL REFERENCES merchants (id),
    email         text NOT NULL,
    password_hash text NOT NULL,                -- argon2id
    first_name    text NOT NULL,
    last_name     text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_email_key ON users (lower(email));

CREATE TABLE applications (
    id          uuid PRIMARY KEY,
    merchant_id uuid NOT NULL REFERENCES merchants (id),
    name        text NOT NULL,
    description jsonb,
    is_enabled  boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX applications_by_merchant ON applications (merchant_id, created_at DESC, id DESC);

CREATE TABLE api_keys (
    id             uuid PRIMARY KEY,
    application_id uuid NOT NULL REFERENCES applications (id),
    key_hash       bytea NOT NULL UNIQUE,       -- SHA-256 of the key; the key is shown once, never stored
    key_prefix     text NOT NULL,
    description    text NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL DEFAULT now(),
    revoked_at     timestamptz
);
CREATE INDEX api_keys_by_application ON api_keys (application_id, created_at DESC, id DESC);
