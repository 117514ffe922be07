CREATE TABLE `vector_store_indexes` (
	`vector_store_id` text PRIMARY KEY NOT NULL,
	`dimensions` integer NOT NULL,
	`backfill_until` integer NOT NULL,
	`backfilled_to` integer NOT NULL,
	`ready_at` integer,
	`created_at` integer NOT NULL
);
