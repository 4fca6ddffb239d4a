-- The token buckets of the rate limits, shared by every process on this database
-- (storage/rate_buckets.py, docs/rate-limits.md): one row per key, `tokens` as of `updated_at`,
-- refilled on read at the rate the caller passes. `tokens` is negative while paced requests owe
-- tokens that have not come yet. `taken` is what the last take got (its statement returns it), and
-- `full_at` when the bucket will be full again: a full bucket is what a key without a row gets, so the
-- housekeeping deletes such rows.
--
-- UNLOGGED: a bucket is written by nearly every request of a busy key and is worth no WAL. A crash of
-- PostgreSQL empties the table (every bucket full again, once), and a standby has no rows of it.

CREATE UNLOGGED TABLE rate_buckets (
    key        text PRIMARY KEY,
    tokens     double precision NOT NULL,
    taken      integer NOT NULL,
    updated_at timestamptz NOT NULL,
    full_at    timestamptz NOT NULL
) WITH (fillfactor = 50);  -- room on each page for the updates to stay HOT
