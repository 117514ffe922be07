CREATE TABLE `usage` (
	`workspace_id` text NOT NULL,
	`hour` integer NOT NULL,
	`kind` text NOT NULL,
	`model` text NOT NULL,
	`api_key_id` text NOT NULL,
	`virtual_key_id` text NOT NULL,
	`requests` integer DEFAULT 0 NOT NULL,
	`prompt_tokens` integer DEFAULT 0 NOT NULL,
	`completion_tokens` integer DEFAULT 0 NOT NULL,
	`total_tokens` integer DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `usage_key` ON `usage` (`workspace_id`,`hour`,`kind`,`model`,`api_key_id`,`virtual_key_id`);
--> statement-breakpoint
-- A run's tokens are counted once, when it ends: in the statement that moves it into a terminal state,
-- with the usage that statement writes.
CREATE TRIGGER `usage_of_ended_runs` AFTER UPDATE OF `status` ON `runs`
WHEN new.status IN ('completed', 'failed', 'cancelled', 'expired', 'incomplete')
  AND old.status NOT IN ('completed', 'failed', 'cancelled', 'expired', 'incomplete')
BEGIN
  INSERT INTO `usage` (`workspace_id`, `hour`, `kind`, `model`, `api_key_id`, `virtual_key_id`, `requests`, `prompt_tokens`, `completion_tokens`, `total_tokens`)
  VALUES (
    new.workspace_id, new.created_at - new.created_at % 3600000, 'run', new.model, new.api_key_id, new.virtual_key_id, 1,
    coalesce(json_extract(new.usage, '$.prompt_tokens'), 0),
    coalesce(json_extract(new.usage, '$.completion_tokens'), 0),
    coalesce(json_extract(new.usage, '$.total_tokens'), 0)
  )
  ON CONFLICT (`workspace_id`, `hour`, `kind`, `model`, `api_key_id`, `virtual_key_id`) DO UPDATE SET
    `requests` = `requests` + 1,
    `prompt_tokens` = `prompt_tokens` + excluded.prompt_tokens,
    `completion_tokens` = `completion_tokens` + excluded.completion_tokens,
    `total_tokens` = `total_tokens` + excluded.total_tokens;
END;--> statement-breakpoint
-- Runs that ended before this migration.
INSERT INTO `usage` (`workspace_id`, `hour`, `kind`, `model`, `api_key_id`, `virtual_key_id`, `requests`, `prompt_tokens`, `completion_tokens`, `total_tokens`)
SELECT workspace_id, created_at - created_at % 3600000, 'run', model, api_key_id, virtual_key_id, count(*),
  sum(coalesce(json_extract(usage, '$.prompt_tokens'), 0)),
  sum(coalesce(json_extract(usage, '$.completion_tokens'), 0)),
  sum(coalesce(json_extract(usage, '$.total_tokens'), 0))
FROM `runs`
WHERE status IN ('completed', 'failed', 'cancelled', 'expired', 'incomplete')
GROUP BY 1, 2, 3, 4, 5, 6;
