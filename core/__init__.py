"""Below everything, no Django app: logs, masking, the one date-time formatter, the hot SQL."""
