-- Distributed mode needs Postgres; the table exists here too so both backends
-- share one schema history (see migrations/postgres/0005_transport_leases.sql).
CREATE TABLE transport_leases (
    kind        TEXT    NOT NULL,
    slot        INTEGER NOT NULL,
    holder      TEXT    NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (kind, slot)
);
