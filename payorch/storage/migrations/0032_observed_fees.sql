-- Fees reconciliation observed (docs/reconciliation.md, "Observed fees"): per application, provider,
-- payment method, currency and settled day, the matched payments' gross and fees, in minor units. A
-- completed run replaces the rows of its period's days, so the newest run over a day tells it;
-- `net` routing reads the sums over the last `reconciliation.fee_window_days` days.
CREATE TABLE observed_fees (
    application_id uuid NOT NULL REFERENCES applications (id),
    provider       text NOT NULL,
    payment_method text NOT NULL,
    currency       char(3) NOT NULL,
    settled_on     date NOT NULL,
    payments       integer NOT NULL CHECK (payments > 0),
    gross_minor    bigint NOT NULL CHECK (gross_minor > 0),
    fee_minor      bigint NOT NULL,
    PRIMARY KEY (application_id, provider, settled_on, payment_method, currency)
);
