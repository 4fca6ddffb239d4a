-- The e-mail of the user who stored each version of a routing document, kept beside their id
-- (migration 0027): a user can be removed from their merchant, and the history outlives them, so
-- the console still says who stored a version. Null for versions stored before payorch kept the
-- author; the versions whose author is still a user are filled in now.

ALTER TABLE routing_documents ADD COLUMN stored_by_email text;
UPDATE routing_documents SET stored_by_email = users.email
    FROM users WHERE users.id = routing_documents.stored_by;
