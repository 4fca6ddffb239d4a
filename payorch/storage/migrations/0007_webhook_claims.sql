-- A claimed webhook delivery says so: `claimed_until` is the end of the lease of the attempt in
-- flight (NULL when none is). The claim query counts the attempts in flight per configuration from
-- it, so one endpoint never holds more than its share of the delivery slots.

ALTER TABLE webhook_deliveries ADD COLUMN claimed_until timestamptz;
CREATE INDEX webhook_deliveries_in_flight
    ON webhook_deliveries (config_id, claimed_until) WHERE claimed_until IS NOT NULL;
