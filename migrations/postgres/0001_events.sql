-- The append-only event store (DESIGN section 7).
-- Primary key (stream_type, stream_id, seq) makes a concurrent append to the same
-- stream version a unique violation; `position` is the global audit order.
CREATE TABLE events (
    stream_type   TEXT        NOT NULL,
    stream_id     TEXT        NOT NULL,
    seq           BIGINT      NOT NULL CHECK (seq > 0),
    position      BIGSERIAL   NOT NULL UNIQUE,
    event_type    TEXT        NOT NULL,
    event_version INT         NOT NULL CHECK (event_version > 0),
    payload       JSONB       NOT NULL,
    actor         TEXT        NOT NULL,
    reason        TEXT        NULL,
    -- Extracted at append time so the audit filter is an index scan, not a JSON scan.
    deployment_id TEXT        NULL,
    recorded_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (stream_type, stream_id, seq)
);

-- GET /admin/v1/audit: every filter combination walks an index in position order.
-- recorded_at never decreases along position (the writer floors it at the current
-- maximum), so a time bound is found here in O(log n) and becomes a position bound.
CREATE INDEX events_recorded_at ON events (recorded_at, position);
CREATE INDEX events_type_position ON events (event_type, position);
CREATE INDEX events_actor_position ON events (actor, position);
CREATE INDEX events_deployment_position ON events (deployment_id, position)
    WHERE deployment_id IS NOT NULL;
CREATE INDEX events_deployment_type_position ON events (deployment_id, event_type, position)
    WHERE deployment_id IS NOT NULL;
