"""The results CSV: its columns (`schema`), the file on disk (`files`), the pandas view
(`frame`) and merging (`merge`)."""
