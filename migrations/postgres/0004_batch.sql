-- Batch files and shards (DESIGN section 6). A batch's lifecycle is events in the
-- `batch` stream; what changes many times a second while it runs (which runner
-- holds a shard, how far it got) is state here, guarded by a fencing epoch.
-- Times are unix milliseconds so both backends read the same integers.

-- Files uploaded through /v1/files and written by finalization. The bytes live in
-- object storage under `object_key`; this row is their metadata.
CREATE TABLE batch_files (
    id               TEXT   PRIMARY KEY,
    tenant           TEXT   NOT NULL,
    filename         TEXT   NOT NULL,
    purpose          TEXT   NOT NULL,
    bytes            BIGINT NOT NULL,
    lines            BIGINT NOT NULL,
    object_key       TEXT   NOT NULL,
    -- The url every line names (input files only).
    endpoint         TEXT,
    -- Prompt plus output tokens the lines may need (input files only).
    estimated_tokens BIGINT NOT NULL,
    created_at       BIGINT NOT NULL
);

-- One row per shard: rows [first_row, end_row) of a batch's input. A runner claims
-- a shard by raising `epoch`; a checkpoint moves `next_row` and appends to
-- `segments` only where `epoch` is still the one it claimed, so a superseded
-- runner's late writes change nothing.
CREATE TABLE batch_shards (
    batch_id    TEXT   NOT NULL,
    shard_no    BIGINT NOT NULL,
    first_row   BIGINT NOT NULL,
    end_row     BIGINT NOT NULL,
    epoch       BIGINT NOT NULL,
    owner       TEXT,
    lease_until BIGINT NOT NULL,
    next_row    BIGINT NOT NULL,
    -- JSON array of committed segments: [{"key", "from_row", "to_row"}].
    segments    TEXT   NOT NULL,
    completed   BIGINT NOT NULL,
    failed      BIGINT NOT NULL,
    done        BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (batch_id, shard_no)
);
