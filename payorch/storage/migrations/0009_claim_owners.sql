-- Every claim names the process that holds it: its node id, drawn from `payorch_nodes` when the
-- process starts. The process holds a session-level advisory lock on that id (two-key form: class
-- 0x7061796F, "payo", and the node id) on a connection of its own for as long as it runs, so when
-- the process dies PostgreSQL drops the connection and the lock with it, and any other process sees
-- in `pg_locks`, in one statement, that the claim's owner is gone and takes the claim over at once.
-- The leases (`locked_until`, `claimed_until`...) stay, as the last resort for a process alive but
-- wedged. NULL: a claim made by nobody known (older rows, or while a process had lost its lock),
-- which only its lease ends.
CREATE SEQUENCE payorch_nodes AS integer MINVALUE 1 NO CYCLE;

ALTER TABLE idempotency_keys ADD COLUMN owner_node integer;
ALTER TABLE provider_configs ADD COLUMN busy_owner integer;

ALTER TABLE webhook_deliveries ADD COLUMN claimed_by integer;
CREATE INDEX webhook_deliveries_claimed_by ON webhook_deliveries (claimed_by) WHERE claimed_by IS NOT NULL;

ALTER TABLE sandbox_deliveries ADD COLUMN claimed_by integer;
CREATE INDEX sandbox_deliveries_claimed_by ON sandbox_deliveries (claimed_by) WHERE claimed_by IS NOT NULL;

ALTER TABLE refunds ADD COLUMN submit_claimed_by integer;
CREATE INDEX refunds_submit_claimed_by ON refunds (submit_claimed_by) WHERE submit_claimed_by IS NOT NULL;
