-- Who stored each version of an application's routing document: the merchant's user whose access
-- token sent it (PUT /api/v1/applications/{id}/routing, or the console's save). Null for the
-- versions stored before payorch kept it. Not a foreign key: the history outlives its authors.

ALTER TABLE routing_documents ADD COLUMN stored_by uuid;
