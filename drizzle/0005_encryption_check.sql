CREATE TABLE `encryption_check` (
	`id` integer PRIMARY KEY NOT NULL,
	`sealed` text NOT NULL,
	`created_at` integer NOT NULL
);
