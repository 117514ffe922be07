CREATE TABLE `file_reservations` (
	`seq` integer PRIMARY KEY NOT NULL,
	`blob_key` text NOT NULL,
	`workspace_id` text NOT NULL,
	`bytes` integer NOT NULL,
	`expires_at` integer NOT NULL,
	`waiting` integer DEFAULT false NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `file_reservations_blob_key` ON `file_reservations` (`blob_key`);--> statement-breakpoint
CREATE INDEX `file_reservations_workspace` ON `file_reservations` (`workspace_id`);--> statement-breakpoint
CREATE INDEX `file_reservations_expires_at` ON `file_reservations` (`expires_at`);--> statement-breakpoint
CREATE INDEX `files_blob_key` ON `files` (`blob_key`);