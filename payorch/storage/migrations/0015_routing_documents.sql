-- Each application's routing document (PUT /api/v1/applications/{id}/routing): every version a
-- merchant stored is kept, the one with the highest version is in force. `document` is the
-- document as payorch writes it back (`engine.routing.document.document_json`).
--
-- Storing a version notifies `payorch_applications` on commit (payload: the application id), as a
-- provider configuration's change does (migration 0008): application actors hold the document in
-- force between requests, and forget it when they hear this.

CREATE TABLE routing_documents (
    application_id uuid NOT NULL REFERENCES applications (id),
    version        integer NOT NULL CHECK (version >= 1),
    document       jsonb NOT NULL,
    created_at     timestamptz NOT NULL,
    PRIMARY KEY (application_id, version)
);

CREATE FUNCTION payorch_routing_document_stored() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('payorch_applications', NEW.application_id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER routing_document_stored
    AFTER INSERT ON routing_documents
    FOR EACH ROW EXECUTE FUNCTION payorch_routing_document_stored();
