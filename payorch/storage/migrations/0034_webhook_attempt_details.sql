-- What each webhook delivery attempt sent and got back, for the delivery's page (docs/webhooks.md,
-- "Delivery details"): the headers payorch sent (the signature among them, never a secret), the
-- receiver's headers (bounded) beside the first 4 KiB of its body (`response_body`, already here).
-- The body sent is the event's own (`outbox_events.payload`), stored once for every attempt.
--
-- These details are kept `webhooks.attempt_details_retention_days`: then the pruning supervisor
-- (`supervisors/attempt_details.py`) empties them and stamps `details_removed_at`; the attempt's
-- time, status, error and latency stay. The partial index holds the attempts whose details are
-- still kept, oldest first: a pruning batch reads only what it removes.
ALTER TABLE webhook_attempts
    ADD COLUMN request_headers    jsonb,          -- [[name, value], ...] as sent
    ADD COLUMN response_headers   jsonb,          -- [[name, value], ...] as received, bounded
    ADD COLUMN details_removed_at timestamptz;

CREATE INDEX webhook_attempts_details_kept ON webhook_attempts (attempted_at) WHERE details_removed_at IS NULL;
