-- A segment's window is ordered by when the attempt's session was created, not by when its outcome
-- arrived (docs/routing.md, "The window"): an abandonment is known only at expiry, half an hour
-- after the session, and by arrival it would count as newer than the payments of every session
-- created meanwhile. Each row keeps its session's creation time; the index that reads a segment's
-- newest outcomes is ordered by it (then `seq`, so outcomes of sessions created in the same
-- microsecond keep one order), `outcome` included, so a window is still one backward index-only
-- range scan (`storage.routing_outcomes`).

ALTER TABLE routing_outcomes ADD COLUMN session_created_at timestamptz;
UPDATE routing_outcomes o SET session_created_at = s.created_at
    FROM checkout_sessions s WHERE s.id = o.session_id;
ALTER TABLE routing_outcomes ALTER COLUMN session_created_at SET NOT NULL;
DROP INDEX routing_outcomes_by_segment;
CREATE INDEX routing_outcomes_by_segment
    ON routing_outcomes (application_id, provider_name, payment_method, currency, session_created_at, seq)
    INCLUDE (outcome);
