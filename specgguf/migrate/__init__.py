"""The legacy-flag migration: removed-flag tables, command-line and file rewriting, and the
guard that never passes a file still holding a removed flag. Imports no model runtime."""
