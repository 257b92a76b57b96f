-- The request log (DESIGN section 7): one row per request the API served or
-- refused, written in batches off the request path. Ids, codes, counts and
-- timings only: never prompt or output text.
-- request_id is the primary key so a retried batch cannot double-count a request
-- (the writer inserts with ON CONFLICT (request_id) DO NOTHING).
CREATE TABLE request_log (
    request_id        TEXT             PRIMARY KEY,
    tenant            TEXT             NOT NULL,
    deployment_id     TEXT             NOT NULL,
    revision_id       TEXT             NULL,
    executor_id       TEXT             NULL,
    lane              TEXT             NOT NULL,
    rollout_id        TEXT             NULL,
    endpoint          TEXT             NOT NULL,
    status_code       INTEGER          NOT NULL,
    finish_reason     TEXT             NULL,
    error_code        TEXT             NULL,
    -- BIGINT so every u32 count fits (INTEGER is signed 32-bit here).
    prompt_tokens     BIGINT           NOT NULL,
    completion_tokens BIGINT           NOT NULL,
    queue_ms          DOUBLE PRECISION NULL,
    prefill_ms        DOUBLE PRECISION NULL,
    ttft_ms           DOUBLE PRECISION NULL,
    decode_ms         DOUBLE PRECISION NULL,
    e2e_ms            DOUBLE PRECISION NOT NULL,
    received_at       TIMESTAMPTZ      NOT NULL
);

-- Rollout analysis: one revision's figures, and the split between revisions,
-- of a deployment since a time.
CREATE INDEX request_log_deployment_revision_received
    ON request_log (deployment_id, revision_id, received_at);
-- Retention and time-window scans.
CREATE INDEX request_log_received ON request_log (received_at);
