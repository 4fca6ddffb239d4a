-- A provider's event names the checkout it is about; for an attempt that has ended (the session's
-- row now holds the next attempt) payorch finds the attempt by that checkout in `payment_attempts`
-- (`storage.attempts.ended_attempt_of_checkout`): this index is that lookup.
CREATE INDEX payment_attempts_by_checkout ON payment_attempts (provider_name, provider_reference);

-- The refund payorch created by itself for an attempt paid after another attempt of its session
-- was (`AttemptStatus.DUPLICATE_REFUNDED`): that refund returns this attempt's payment, not the
-- session's, so it never counts against the session's refundable balance (`storage.refunds`).
ALTER TABLE payment_attempts ADD COLUMN refund_id uuid UNIQUE REFERENCES refunds (id);
