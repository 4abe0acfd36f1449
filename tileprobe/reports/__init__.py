"""What people read: terminal tables, markdown reports, charts, diffs, recommendations, explain."""
