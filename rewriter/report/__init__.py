"""Stage 7, report: what people and programs read (text, JSON, tables)."""
