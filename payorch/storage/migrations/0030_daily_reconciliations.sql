-- Daily reconciliation (docs/reconciliation.md): one row per linked account and settled day, claimed
-- by the one process that starts that day's run; a failed run is tried again from `next_try_at`.
CREATE TABLE daily_reconciliations (
    application_id uuid NOT NULL REFERENCES applications (id),
    provider       text NOT NULL,
    day            date NOT NULL,
    tries          integer NOT NULL,
    next_try_at    timestamptz NOT NULL,
    run_id         uuid REFERENCES reconciliation_runs (id),
    PRIMARY KEY (application_id, provider, day)
);
