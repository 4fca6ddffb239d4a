"""What payorch sends out to merchants' webhook endpoints, used by the delivery supervisor and by the
test-webhook route alike: the HTTP client (`client`), which connects only where the SSRF guard
(`ssrf`) allows, to the very addresses it checked (`guarded_transport`), which secrets sign
(`signing`), and one signed attempt whose answer is read within bounds (`attempt`): its status, a
`Retry-After` read per RFC 9110 (`retry_after`), and an excerpt of its body fit to store (`text`).

Nothing a receiver sends can make an attempt raise: every answer, every failure to answer, and any
error inside payorch while attempting comes back as an `AttemptResult`.
"""
