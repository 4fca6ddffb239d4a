-- When the provider last reported a lost dispute (a chargeback) of the session's payment: the money
-- was taken back from the merchant, whatever the session's state (a REFUNDED one too). Null: never.
ALTER TABLE checkout_sessions ADD COLUMN dispute_lost_at timestamptz;
