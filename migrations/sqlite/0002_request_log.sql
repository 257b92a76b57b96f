-- The request log (DESIGN section 7), SQLite flavour: one row per request the API
-- served or refused, written in batches off the request path. Ids, codes, counts
-- and timings only: never prompt or output text.
-- request_id is the primary key so a retried batch cannot double-count a request
-- (the writer inserts with ON CONFLICT (request_id) DO NOTHING). Timestamps are
-- fixed-width RFC 3339 UTC text (YYYY-MM-DDTHH:MM:SS.ffffffZ) so text order is
-- time order, as in the events table.
CREATE TABLE request_log (
    request_id        TEXT    PRIMARY KEY NOT NULL,
    tenant            TEXT    NOT NULL,
    deployment_id     TEXT    NOT NULL,
    revision_id       TEXT    NULL,
    executor_id       TEXT    NULL,
    lane              TEXT    NOT NULL,
    rollout_id        TEXT    NULL,
    endpoint          TEXT    NOT NULL,
    status_code       INTEGER NOT NULL,
    finish_reason     TEXT    NULL,
    error_code        TEXT    NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    queue_ms          REAL    NULL,
    prefill_ms        REAL    NULL,
    ttft_ms           REAL    NULL,
    decode_ms         REAL    NULL,
    e2e_ms            REAL    NOT NULL,
    received_at       TEXT    NOT NULL
);

-- Rollout analysis: one revision's figures, and the split between revisions,
-- of a deployment since a time.
CREATE INDEX request_log_deployment_revision_received
    ON request_log (deployment_id, revision_id, received_at);
-- Retention and time-window scans.
CREATE INDEX request_log_received ON request_log (received_at);
