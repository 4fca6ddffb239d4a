-- Users of a merchant and their roles (docs/api.md, "Users and roles"): `admin` may do everything,
-- `read_only` every read and nothing else (`values.roles.Role`). Every user until now was their
-- merchant's admin.
ALTER TABLE users ADD COLUMN role text NOT NULL DEFAULT 'admin' CHECK (role IN ('admin', 'read_only'));
CREATE INDEX users_by_merchant ON users (merchant_id, created_at DESC, id DESC);

-- An admin's invitation of another user to their own merchant: a one-time signup link with the role
-- the user will have. Only a SHA-256 hash of its token is stored. A newer invitation of the same
-- e-mail to the same merchant ends the older (its `ended_at` set), as do using and revoking it.
CREATE TABLE user_invites (
    id          uuid PRIMARY KEY,
    merchant_id uuid NOT NULL REFERENCES merchants (id),
    email       text NOT NULL,                  -- canonical form; only this address may use it
    role        text NOT NULL CHECK (role IN ('admin', 'read_only')),
    invited_by  uuid NOT NULL,                  -- the admin who made it (not a key: it outlives them)
    token_hash  bytea NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    ended_at    timestamptz,                    -- used, revoked, or replaced by a newer invitation
    user_id     uuid                            -- the user it created
);
CREATE INDEX user_invites_open_by_merchant ON user_invites (merchant_id, created_at DESC, id DESC)
    WHERE ended_at IS NULL;
