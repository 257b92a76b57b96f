-- The append-only event store (DESIGN section 7), SQLite flavour.
-- SQLite can only auto-assign an INTEGER PRIMARY KEY, so `position` is the rowid
-- and (stream_type, stream_id, seq) is a UNIQUE key: the same conflict semantics
-- as the Postgres primary key. Timestamps are fixed-width RFC 3339 UTC text
-- (YYYY-MM-DDTHH:MM:SS.ffffffZ) so text order is time order.
CREATE TABLE events (
    position      INTEGER PRIMARY KEY AUTOINCREMENT,
    stream_type   TEXT    NOT NULL,
    stream_id     TEXT    NOT NULL,
    seq           INTEGER NOT NULL CHECK (seq > 0),
    event_type    TEXT    NOT NULL,
    event_version INTEGER NOT NULL CHECK (event_version > 0),
    payload       TEXT    NOT NULL CHECK (json_valid(payload)),
    actor         TEXT    NOT NULL,
    reason        TEXT    NULL,
    deployment_id TEXT    NULL,
    recorded_at   TEXT    NOT NULL,
    UNIQUE (stream_type, stream_id, seq)
);

-- recorded_at never decreases along position (the writer floors it at the current
-- maximum), so a time bound is found here in O(log n) and becomes a position bound.
CREATE INDEX events_recorded_at ON events (recorded_at, position);
CREATE INDEX events_type_position ON events (event_type, position);
CREATE INDEX events_actor_position ON events (actor, position);
CREATE INDEX events_deployment_position ON events (deployment_id, position)
    WHERE deployment_id IS NOT NULL;
CREATE INDEX events_deployment_type_position ON events (deployment_id, event_type, position)
    WHERE deployment_id IS NOT NULL;
