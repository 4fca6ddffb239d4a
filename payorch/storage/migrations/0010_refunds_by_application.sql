-- The console's 30-day picture sums an application's refunds by the day they were made: this index
-- reads one application's refunds of a window in order, as checkout_sessions_by_application does
-- for its sessions, instead of every refund of the table.
CREATE INDEX refunds_by_application ON refunds (application_id, created_at);
