-- Password reset links (`payorch reset-password`): a one-time link for one admin user, made by an
-- operator. Only a SHA-256 hash of its token is stored. A newer link for the same user ends the
-- older (its `ended_at` set), as does using it; an ended or expired link is refused.
CREATE TABLE password_resets (
    id          uuid PRIMARY KEY,
    user_id     uuid NOT NULL REFERENCES users (id),
    token_hash  bytea NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    ended_at    timestamptz,                    -- used, or replaced by a newer link
    used        boolean NOT NULL DEFAULT false  -- ended by setting a password (else by a newer link)
);
-- The user's link still open, found when a newer one ends it.
CREATE INDEX password_resets_open_by_user ON password_resets (user_id) WHERE ended_at IS NULL;
