-- How many rows the two lists that grow with traffic hold, kept in the same transaction as the rows
-- themselves: a list's `totalItems` is one primary-key read however long the list, and a page past
-- the end is answered from it without touching the list (storage/list_counts.py).
--
-- The counters move in statement-level triggers: one upsert per statement for each application (or
-- webhook configuration) it touched, in key order, so a batch of inserts costs one counter update
-- per key and two statements never take two counters' locks in opposite orders. No code path that
-- writes the rows, the bench's and tests' straight SQL included, can forget to count.

CREATE TABLE session_counts (
    application_id uuid PRIMARY KEY REFERENCES applications (id),
    sessions       bigint NOT NULL CHECK (sessions >= 0)
);

CREATE TABLE webhook_delivery_counts (
    config_id  uuid PRIMARY KEY REFERENCES webhook_configs (id),
    deliveries bigint NOT NULL CHECK (deliveries >= 0)
);

INSERT INTO session_counts (application_id, sessions)
    SELECT application_id, count(*) FROM checkout_sessions GROUP BY application_id;
INSERT INTO webhook_delivery_counts (config_id, deliveries)
    SELECT config_id, count(*) FROM webhook_deliveries GROUP BY config_id;

CREATE FUNCTION payorch_count_sessions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO session_counts AS c (application_id, sessions)
            SELECT application_id, count(*) FROM added GROUP BY application_id ORDER BY application_id
            ON CONFLICT (application_id) DO UPDATE SET sessions = c.sessions + excluded.sessions;
    ELSE
        UPDATE session_counts c SET sessions = c.sessions - gone.n
            FROM (SELECT application_id, count(*) AS n FROM removed GROUP BY application_id
                  ORDER BY application_id) AS gone
            WHERE c.application_id = gone.application_id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER sessions_counted_on_insert AFTER INSERT ON checkout_sessions
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION payorch_count_sessions();
CREATE TRIGGER sessions_counted_on_delete AFTER DELETE ON checkout_sessions
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION payorch_count_sessions();

CREATE FUNCTION payorch_count_webhook_deliveries() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO webhook_delivery_counts AS c (config_id, deliveries)
            SELECT config_id, count(*) FROM added GROUP BY config_id ORDER BY config_id
            ON CONFLICT (config_id) DO UPDATE SET deliveries = c.deliveries + excluded.deliveries;
    ELSE
        UPDATE webhook_delivery_counts c SET deliveries = c.deliveries - gone.n
            FROM (SELECT config_id, count(*) AS n FROM removed GROUP BY config_id ORDER BY config_id) AS gone
            WHERE c.config_id = gone.config_id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER webhook_deliveries_counted_on_insert AFTER INSERT ON webhook_deliveries
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION payorch_count_webhook_deliveries();
CREATE TRIGGER webhook_deliveries_counted_on_delete AFTER DELETE ON webhook_deliveries
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION payorch_count_webhook_deliveries();
