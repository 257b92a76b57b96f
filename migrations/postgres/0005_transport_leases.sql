-- Distributed mode (DESIGN section 8): which process reads which Kafka partition.
-- Each executor holds one `stoker.interactive` partition and each API instance one
-- `stoker.replies` partition through a lease it renews; a lease that expired (its
-- holder was killed) can be taken by the next process. Times are unix
-- milliseconds from the database's clock, so processes on machines with skewed
-- clocks agree on expiry.
CREATE TABLE transport_leases (
    kind        TEXT   NOT NULL,
    slot        INT    NOT NULL,
    holder      TEXT   NOT NULL,
    expires_at  BIGINT NOT NULL,
    PRIMARY KEY (kind, slot)
);
