-- The expiry and refund-submission supervisors take a fair share of each merchant's due work per
-- round (storage/due_work.py): one probe per application, reading its oldest due items in order.
CREATE INDEX checkout_sessions_pending_expiry_by_application
    ON checkout_sessions (application_id, expires_at) WHERE status = 'PENDING';
CREATE INDEX refunds_to_submit_by_application
    ON refunds (application_id, next_submit_at) WHERE provider_reference IS NULL AND status = 'PENDING';
