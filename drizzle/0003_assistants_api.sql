ALTER TABLE `virtual_keys` ADD `models` text DEFAULT '[]' NOT NULL;--> statement-breakpoint
ALTER TABLE `virtual_keys` ADD `is_default` integer DEFAULT false NOT NULL;--> statement-breakpoint
CREATE UNIQUE INDEX `virtual_keys_workspace_default` ON `virtual_keys` (`workspace_id`) WHERE is_default = 1 AND revoked_at IS NULL;--> statement-breakpoint
CREATE UNIQUE INDEX `runs_one_active_per_thread` ON `runs` (`thread_id`) WHERE status IN ('queued', 'in_progress', 'requires_action', 'cancelling');