-- Each session's routing explanation (docs/routing.md): the matching rule's name (NULL: the default
-- route), why its provider holds it (`routing_reason`, one of `values.statuses.RoutingReason`: its
-- CHECK constraint is written by migration 0014, `storage.enumerated_columns`) and the version of
-- the routing document that decided (0: the default document). Sessions created before this
-- migration have all three NULL: the API reads them as `rule: null, reason: "dynamic", version: 0`.

ALTER TABLE checkout_sessions
    ADD COLUMN routing_rule    text,
    ADD COLUMN routing_reason  text,
    ADD COLUMN routing_version integer CHECK (routing_version >= 0);
