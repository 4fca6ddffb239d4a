"""Reconciliation (docs/reconciliation.md): what a provider settled for an application's linked
account over a period of UTC days, item by item, against what payorch recorded.

- `match`: the pure rules: what one item's outcome is, given what payorch recorded of it;
- `runs`: a run, off the request path: streams both sides in batches, stores every item, checks
  the payouts, and repairs what was lost (`repair`);
- `repair`: a payment the provider settled that payorch has unpaid, applied as its event would be;
- `pacing`: a run's share of the server, and its waits for a provider answering 429 or 5xx;
- `events`: the `reconciliation.completed` webhook event of a completed run, which keeps the fees
  the run observed (`storage.observed_fees`);
- `fees`: those observed fees read for a page (routing weighs them: `engine.routing.observed_fees`).
"""
