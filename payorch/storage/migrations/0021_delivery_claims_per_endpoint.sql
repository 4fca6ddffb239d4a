-- The delivery claim (storage/webhook_deliveries.py) costs per endpoint, not per delivery waiting:
-- it finds the applications with PENDING deliveries by a loose index scan (one index descent per
-- application, however many deliveries each has), then reads each endpoint's due deliveries one
-- index step at a time in order, no more than it may claim, each checked against the PENDING
-- deliveries of its session before it (one descent). Before these indexes it grouped every
-- claimable delivery of every merchant on each round: one merchant's backlog of 155,000 cost every
-- round 240 ms.
CREATE INDEX webhook_deliveries_pending_by_application
    ON webhook_deliveries (application_id) WHERE status = 'PENDING';
CREATE INDEX webhook_deliveries_pending_by_config
    ON webhook_deliveries (config_id, next_attempt_at, event_seq) WHERE status = 'PENDING';
CREATE INDEX webhook_deliveries_pending_by_session
    ON webhook_deliveries (config_id, session_id, event_seq) WHERE status = 'PENDING';
-- Served by the claim before, and by nothing since: PostgreSQL took it for the claim's steps through
-- one endpoint's deliveries (a range of times, every endpoint's rows in it read and dropped) where
-- `webhook_deliveries_pending_by_config` reads just the next one.
DROP INDEX webhook_deliveries_due;
