-- Learned routing counts each payment attempt's outcome at its own provider (docs/routing.md, "One
-- outcome"), not only a session's first: a session whose first attempt was declined and whose next
-- was paid has two rows, a failure at the first provider and a success at the second. So the
-- unique key is the session and its attempt's number (`payment_attempts.number`: 1 for the
-- attempt a session was created with), not the session alone. Every row recorded so far is its
-- session's first attempt's, hence the default (`storage.routing_outcomes` always names the attempt).

ALTER TABLE routing_outcomes ADD COLUMN attempt_number integer NOT NULL DEFAULT 1 CHECK (attempt_number >= 1);
ALTER TABLE routing_outcomes DROP CONSTRAINT routing_outcomes_session_id_key;
ALTER TABLE routing_outcomes ADD CONSTRAINT routing_outcomes_per_attempt UNIQUE (session_id, attempt_number);
