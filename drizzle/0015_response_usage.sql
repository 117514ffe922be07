-- A response's usage is counted as the kind `response`, a run's as `run`: the trigger that counts
-- ended runs (0006) takes the run's kind. What was counted before stays as it was (kind `run`).
DROP TRIGGER `usage_of_ended_runs`;--> statement-breakpoint
CREATE TRIGGER `usage_of_ended_runs` AFTER UPDATE OF `status` ON `runs`
WHEN new.status IN ('completed', 'failed', 'cancelled', 'expired', 'incomplete')
  AND old.status NOT IN ('completed', 'failed', 'cancelled', 'expired', 'incomplete')
BEGIN
  INSERT INTO `usage` (`workspace_id`, `hour`, `kind`, `model`, `api_key_id`, `virtual_key_id`, `requests`, `prompt_tokens`, `completion_tokens`, `total_tokens`)
  VALUES (
    new.workspace_id, new.created_at - new.created_at % 3600000, new.kind, new.model, new.api_key_id, new.virtual_key_id, 1,
    coalesce(json_extract(new.usage, '$.prompt_tokens'), 0),
    coalesce(json_extract(new.usage, '$.completion_tokens'), 0),
    coalesce(json_extract(new.usage, '$.total_tokens'), 0)
  )
  ON CONFLICT (`workspace_id`, `hour`, `kind`, `model`, `api_key_id`, `virtual_key_id`) DO UPDATE SET
    `requests` = `requests` + 1,
    `prompt_tokens` = `prompt_tokens` + excluded.prompt_tokens,
    `completion_tokens` = `completion_tokens` + excluded.completion_tokens,
    `total_tokens` = `total_tokens` + excluded.total_tokens;
END;
