-- The provider's id of the payment itself, where it differs from its checkout's id and
-- reconciliation needs it to recognise the provider's settled items (Stripe: the PaymentIntent
-- `pi_...` a Checkout Session made, from `checkout.session.completed` or
-- `checkout.session.async_payment_succeeded`). Stored when the provider reports the payment's
-- success, on the session's row (its open attempt) or on the ended attempt that was paid; NULL
-- for a provider whose checkout reference is the payment's id (Mollie's `tr_...`, the sandbox's)
-- and for payments made before payorch kept it. Indexed per provider for the match.

ALTER TABLE checkout_sessions ADD COLUMN provider_payment_reference text;
ALTER TABLE payment_attempts ADD COLUMN provider_payment_reference text;
CREATE INDEX checkout_sessions_by_provider_payment_reference
    ON checkout_sessions (provider_name, provider_payment_reference)
    WHERE provider_payment_reference IS NOT NULL;
CREATE INDEX payment_attempts_by_provider_payment_reference
    ON payment_attempts (provider_name, provider_payment_reference)
    WHERE provider_payment_reference IS NOT NULL;
