"""Draft sources: anything that can guess the next tokens cheaply (a model, an n-gram index)."""
