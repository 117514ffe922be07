ALTER TABLE `virtual_keys` ADD `fallbacks` text DEFAULT '[]' NOT NULL;--> statement-breakpoint
ALTER TABLE `virtual_keys` ADD `retry` text;