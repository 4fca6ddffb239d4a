-- Reconciliation (docs/reconciliation.md): what a provider settled for an application's linked
-- account over a period of UTC days, item by item, against what payorch recorded.

-- The sandbox's own test data that settles otherwise than it was paid: `short` settles the payment
-- 1% short (at least one minor unit), `unreported` is paid and settled but never announced by an
-- event, `payout_short` settles in full in a payout one minor unit short, `unsettled` is paid and
-- reported but never settled. NULL: settles as paid.
ALTER TABLE sandbox_checkouts ADD COLUMN settlement_quirk text
    CHECK (settlement_quirk IN ('short', 'unreported', 'payout_short', 'unsettled'));
CREATE INDEX sandbox_checkouts_paid_by_account ON sandbox_checkouts (account, paid_at) WHERE status = 'paid';

-- One run per (application, provider, period). `state` RUNNING, COMPLETED or FAILED; at most one
-- RUNNING run per application and provider (one run per account at a time).
CREATE TABLE reconciliation_runs (
    id             uuid PRIMARY KEY,
    application_id uuid NOT NULL REFERENCES applications (id),
    provider       text NOT NULL,
    first_day      date NOT NULL,
    last_day       date NOT NULL CHECK (last_day >= first_day),
    state          text NOT NULL CHECK (state IN ('RUNNING', 'COMPLETED', 'FAILED')),
    error          text,
    repaired       integer NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL,
    finished_at    timestamptz
);
CREATE INDEX reconciliation_runs_by_application
    ON reconciliation_runs (application_id, created_at DESC, id DESC);
CREATE UNIQUE INDEX reconciliation_runs_one_running
    ON reconciliation_runs (application_id, provider) WHERE state = 'RUNNING';

-- Every item of a run: a settled item (with or without payorch's row) or payorch's row the provider
-- did not settle. Amounts are integer minor units of `currency`, signed as settlements are.
CREATE TABLE reconciliation_items (
    run_id            uuid NOT NULL REFERENCES reconciliation_runs (id),
    seq               integer NOT NULL,
    outcome           text NOT NULL,         -- values.reconciliation.ItemOutcome (CHECK: migration 0014)
    kind              text NOT NULL,
    item_id           text,                  -- the provider's id of the movement
    currency          char(3) NOT NULL,
    gross_minor       bigint,
    fee_minor         bigint,
    net_minor         bigint,
    recorded_minor    bigint,                -- what payorch recorded (signed as gross)
    settled_on        date,
    payment_reference text,
    refund_reference  text,
    payout_id         text,
    method            text,
    session_id        uuid,
    refund_id         uuid,
    repaired          boolean NOT NULL DEFAULT false,
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX reconciliation_items_by_session ON reconciliation_items (run_id, session_id)
    WHERE session_id IS NOT NULL;
CREATE INDEX reconciliation_items_by_refund ON reconciliation_items (run_id, refund_id)
    WHERE refund_id IS NOT NULL;

-- Each payout arriving in the period, and the nets of the run's items it carried.
CREATE TABLE reconciliation_payouts (
    run_id         uuid NOT NULL REFERENCES reconciliation_runs (id),
    payout_id      text NOT NULL,
    currency       char(3) NOT NULL,
    amount_minor   bigint NOT NULL,
    items_minor    bigint NOT NULL,
    arrives_on     date NOT NULL,
    reported_as    text NOT NULL,         -- the provider's own word for its state (`paid`...)
    PRIMARY KEY (run_id, payout_id)
);
