-- Where each running process serves its links (its `server.public_base_url`), recorded on its node
-- identity's connection as soon as it holds its node id (`storage.nodes`). `payorch invite` reads
-- it: run in another shell, without the `PAYORCH_*` variables the server was started with, its own
-- configuration may say 8080 where the server listens on 18080, but its link must lead to the
-- server that will accept it. A row counts only while its node is alive (`LIVE_NODES`); the next
-- node to record its own deletes the rows of nodes that are gone.
CREATE TABLE node_public_base_urls (
    node            integer PRIMARY KEY,
    public_base_url text NOT NULL
);
