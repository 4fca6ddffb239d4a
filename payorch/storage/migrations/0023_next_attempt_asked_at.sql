-- When a session's next payment attempt was first asked for (`storage.next_attempt.next_attempt_asked_at`):
-- returns of one declined attempt racing through several processes each ask the next provider for
-- its checkout with the same idempotency key, and must send the same parameters with it (Stripe
-- derives a checkout's expiry from when it was asked for). The first return writes the moment, the
-- others read it; opening the next attempt clears it for the attempt after.
ALTER TABLE checkout_sessions ADD COLUMN next_attempt_asked_at timestamptz;
