"""Text to grammar: JSON schemas, regex patterns and numeric ranges to GBNF, and the size
bounds checked before a grammar is built (no model, no libllama call)."""
