"""Fine-tune job rows: the source of truth for a job's state (PENDING -> RUNNING -> final)."""
