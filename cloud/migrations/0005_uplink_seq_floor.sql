-- Uplink gap tracking survives the retention purge: `floor` is the highest
-- uplink seq whose dedupe row was purged; gaps are only looked for above it.
ALTER TABLE uplink_seq ADD COLUMN floor bigint NOT NULL DEFAULT 0;
