CREATE TABLE `rate_limit_refusals` (
	`seq` integer PRIMARY KEY NOT NULL,
	`policy_id` text NOT NULL,
	`at` integer NOT NULL,
	`group` text NOT NULL,
	`api_key_id` text NOT NULL,
	`virtual_key` text NOT NULL,
	`requested` real NOT NULL,
	`used` real NOT NULL,
	`limit` real NOT NULL
);
--> statement-breakpoint
CREATE INDEX `rate_limit_refusals_policy` ON `rate_limit_refusals` (`policy_id`,`seq`);--> statement-breakpoint
ALTER TABLE `runs` ADD `trace` text;