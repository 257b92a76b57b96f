-- Read models (DESIGN section 7): documents folded from the events, and how far the
-- fold has read. They are disposable: `stoker admin rebuild-projections` empties
-- both tables and replays every event.
CREATE TABLE read_models (
    kind     TEXT   NOT NULL,
    id       TEXT   NOT NULL,
    doc      JSONB  NOT NULL,
    -- The position of the last event folded into this document.
    position BIGINT NOT NULL,
    PRIMARY KEY (kind, id)
);

CREATE TABLE projection_checkpoints (
    name     TEXT   PRIMARY KEY,
    position BIGINT NOT NULL
);
