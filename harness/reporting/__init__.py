"""Reporting: typed records in, aggregated tables and plots out (runs -> points -> main rows)."""
