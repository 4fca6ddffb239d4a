-- Sign-out ends every access token of the user (docs/api.md, "Signing out"): each token carries the
-- user's `session_version` as it was at login (claim `sv`), authentication compares it with this
-- column, and signing out adds one. Tokens issued before this migration carry no `sv` and count as
-- version 0, so they keep working until their user signs out or they expire.
ALTER TABLE users ADD COLUMN session_version integer NOT NULL DEFAULT 0;
