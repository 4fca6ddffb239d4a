-- Payments across a merchant's applications (docs/api.md "Payments across applications"): each
-- session carries its application's merchant, so that the merchant's list, each of its filters and
-- its keyset pages are index range scans on the merchant's own rows, in the list's order (newest
-- first), however many applications the merchant has and however deep the page.
--
-- A row trigger fills `merchant_id` from the session's application as the row is inserted: no code
-- path that writes sessions (the bench's and tests' straight SQL included) can leave it out, and an
-- application never moves to another merchant, so the copy never goes stale.

ALTER TABLE checkout_sessions ADD COLUMN merchant_id uuid;
UPDATE checkout_sessions s SET merchant_id = a.merchant_id FROM applications a WHERE a.id = s.application_id;
ALTER TABLE checkout_sessions ALTER COLUMN merchant_id SET NOT NULL;

CREATE FUNCTION payorch_session_merchant() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT merchant_id INTO NEW.merchant_id FROM applications WHERE id = NEW.application_id;
    RETURN NEW;
END
$$;
CREATE TRIGGER checkout_sessions_merchant BEFORE INSERT ON checkout_sessions
    FOR EACH ROW EXECUTE FUNCTION payorch_session_merchant();

-- The list in its order, and the two filters a person searches by (an order reference, a
-- customer's e-mail: a few rows each) as an equality ahead of that order; the e-mail is the
-- customer's as given at create, compared without regard to case. Status, provider and amount have
-- no index of their own: each session's status changes after its insert and every index is written
-- again by that update, on the create path every merchant shares; those filters read the merchant's
-- list in order and check each row (docs/api.md, "Payments across applications").
CREATE INDEX checkout_sessions_by_merchant
    ON checkout_sessions (merchant_id, created_at DESC, id DESC);
CREATE INDEX checkout_sessions_by_merchant_order_reference
    ON checkout_sessions (merchant_id, order_reference, created_at DESC, id DESC);
CREATE INDEX checkout_sessions_by_merchant_customer_email
    ON checkout_sessions (merchant_id, lower(customer ->> 'email'), created_at DESC, id DESC);
