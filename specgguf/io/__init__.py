"""Text in and out: chat templates (bounded), JSONL batches, traces, streaming output."""
